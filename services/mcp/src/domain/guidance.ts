import type { McpMode } from '@kandev/contracts';

/**
 * The coordinator's choice between queued message, interrupting message and stop (R-1.9,
 * seed "Choosing the control"). One text, reused by both tool descriptions and the task-mode
 * server instructions, so the three never drift apart.
 */
export const PREFER_INTERRUPT_OR_STOP =
  'Prefer message_task_kandev with delivery_mode="interrupt" for urgent stop-and-steer of a running direct child ' +
  '(it should drop its current approach and act on a new instruction now). ' +
  'Use stop_task_kandev for halt-only: the child should stop all current work and nothing should replace it.';

export const CHOOSING_TABLE = [
  'Choosing the control:',
  '| Coordinator intent | Operation | Result |',
  '|---|---|---|',
  '| Send information that can wait | message_task_kandev with delivery_mode="queued" or omitted | Current turn continues; the message waits FIFO. |',
  '| Stop the current approach and give replacement work now | message_task_kandev with delivery_mode="interrupt" | Requests immediate cancel-and-redispatch. If immediate dispatch cannot land safely, the message remains queued. |',
  '| Stop all current work because nothing should replace it | stop_task_kandev | Logical cancellation is accepted and runtime teardown begins; no message or replacement turn is created. |',
].join('\n');

export const STOP_FACTS =
  'stop_task_kandev only works on your direct children (pass the full task UUID); any other task is FORBIDDEN. ' +
  'status "stopped" confirms logical cancellation, not that the agent process has exited (teardown continues in the background); ' +
  '"not_running" means nothing was live, and repeating the call is safe. ' +
  "The stop sends no prompt and starts no turn; it keeps the child's queued messages, its worktree and environment, " +
  'and its descendant tasks untouched. The child can be started again later: CANCELLED sessions cannot be resumed, ' +
  'use spawn_session_kandev to restart it with a new session.';

/** When to read and restart: the delegation loop around stop and message. */
export const LIST_TASKS_WHEN =
  'Use it to watch your delegated work: which children are still working (session state), which are blocked on the operator ' +
  '(pending_questions, pending_permissions) and which are paused or cancelled by a tree hold.';
export const CONVERSATION_WHEN =
  'Use it to read what a child did or said before deciding to steer it (message_task_kandev), halt it (stop_task_kandev) or restart it (spawn_session_kandev). ' +
  'Only your direct children; any other task is FORBIDDEN.';
export const SPAWN_WHEN =
  'Use it to restart a child you stopped with stop_task_kandev, or one whose session ended: stopped sessions cannot be resumed. ' +
  'To steer a child that is still running, use message_task_kandev instead.';
export const RESTART_HINT = 'A child without a live session (stopped, finished or failed) is restarted with spawn_session_kandev.';

const TASK_MODE_INTRO =
  'Kandev task tools. You are a task in a Kandev task tree; your identity comes from your credential, never from tool arguments. ' +
  'create_task_kandev creates a child task of yours (optionally starting it with a prompt); ' +
  'message_task_kandev and stop_task_kandev steer and halt your direct children; ' +
  'list_tasks_kandev lists your direct children (status, live session, hold, pending questions); ' +
  "get_task_conversation_kandev reads a direct child's conversation, paged; " +
  'spawn_session_kandev restarts a direct child that has no live session (after a stop, or when its session ended); ' +
  'ask_user_questions asks the operator and waits for the answer (or a skip); whoami_kandev returns your own task. ' +
  'A delegation loop: create_task_kandev with a prompt, list_tasks_kandev to watch, get_task_conversation_kandev to read, ' +
  'message_task_kandev to steer, stop_task_kandev to halt, spawn_session_kandev to restart.';

/** Server instructions per mode. Only task mode carries the stop/steer guidance. */
export function instructionsFor(mode: McpMode): string {
  switch (mode) {
    case 'task':
      return [TASK_MODE_INTRO, PREFER_INTERRUPT_OR_STOP, CHOOSING_TABLE, STOP_FACTS].join('\n\n');
    case 'config':
    case 'office':
    case 'external':
      return `Kandev MCP server (${mode} mode). whoami_kandev returns the task this credential belongs to.`;
  }
}
