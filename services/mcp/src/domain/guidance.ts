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
  'and its descendant tasks untouched. The child can be started again later.';

const TASK_MODE_INTRO =
  'Kandev task tools. You are a task in a Kandev task tree; your identity comes from your credential, never from tool arguments. ' +
  'create_task_kandev creates a child task of yours (optionally starting it with a prompt); ' +
  'message_task_kandev and stop_task_kandev steer and halt your direct children; ' +
  'ask_user_questions asks the operator and waits for the answer (or a skip); whoami_kandev returns your own task.';

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
