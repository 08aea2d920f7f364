import { OrchMcp } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { z } from 'zod';
import { CHOOSING_TABLE, PREFER_INTERRUPT_OR_STOP, STOP_FACTS } from '../domain/guidance.js';
import { defineTool } from './tool.js';

/** halt-only stop of a direct child. Exactly one input; the caller is the token's task. */
export const stopTaskTool = defineTool({
  name: 'stop_task_kandev',
  title: 'Stop a direct child task (halt-only)',
  description: [
    'Halt-only: stop every live execution of one of your direct child tasks, without sending it anything. ' +
      'Returns {"task_id", "status": "stopped" | "not_running"}.',
    PREFER_INTERRUPT_OR_STOP,
    STOP_FACTS,
    CHOOSING_TABLE,
  ].join('\n\n'),
  modes: ['task'],
  input: {
    task_id: z.uuid().describe('Full UUID of the direct child task to stop.'),
  },
  annotations: {
    title: 'Stop a direct child task (halt-only)',
    readOnlyHint: false,
    destructiveHint: true,
    idempotentHint: true,
    openWorldHint: false,
  },
  async run(args, ctx) {
    return request(
      ctx.nc,
      OrchMcp.stopChildTask,
      { caller_task_id: ctx.caller.task_id, agent_token: ctx.callerToken, task_id: args.task_id },
      { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs },
    );
  },
});
