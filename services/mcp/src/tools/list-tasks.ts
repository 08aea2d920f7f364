import { OrchMcpCoord } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { LIST_TASKS_WHEN } from '../domain/guidance.js';
import { defineTool } from './tool.js';

/** the caller's direct children, with what a coordinator decides on. */
export const listTasksTool = defineTool({
  name: 'list_tasks_kandev',
  title: 'List your child tasks',
  description: [
    'List your direct child tasks, oldest first. Returns {"tasks": [{"id", "title", "status", "session": {"id", "state"} | null, ' +
      '"hold": {"id", "mode"} | null, "pending_questions", "pending_permissions"}]}.',
    LIST_TASKS_WHEN,
  ].join('\n\n'),
  modes: ['task'],
  input: {},
  annotations: { title: 'List your child tasks', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async run(_args, ctx) {
    return request(
      ctx.nc,
      OrchMcpCoord.listChildren,
      { caller_task_id: ctx.caller.task_id, agent_token: ctx.callerToken },
      { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs },
    );
  },
});
