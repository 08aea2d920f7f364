import { OrchMcp } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { defineTool } from './tool.js';

/** Harmless in every mode: the task the credential belongs to. */
export const whoamiTool = defineTool({
  name: 'whoami_kandev',
  title: 'Who am I',
  description: 'Return the Kandev task this credential belongs to.',
  modes: ['task', 'config', 'office', 'external'],
  input: {},
  annotations: { title: 'Who am I', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async run(_args, ctx) {
    return request(
      ctx.nc,
      OrchMcp.whoami,
      { caller_task_id: ctx.caller.task_id, agent_token: ctx.callerToken },
      { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs },
    );
  },
});
