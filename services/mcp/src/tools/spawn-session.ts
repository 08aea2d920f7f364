import { Limits, OrchMcpCoord, text } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { z } from 'zod';
import { SPAWN_WHEN } from '../domain/guidance.js';
import { defineTool } from './tool.js';

/** restart a direct child that has no live session (the restart stop_task_kandev points to). */
export const spawnSessionTool = defineTool({
  name: 'spawn_session_kandev',
  title: 'Start a new session on a child task',
  description: [
    'Start a new session (a fresh agent) on one of your direct child tasks that has no live session, optionally with a first prompt. ' +
      'Returns {"task_id", "session_id", "status": "started"}. ' +
      'A child with a live session, a CANCELLED child or one in a paused or cancelled tree is a CONFLICT error; any task that is not your direct child is FORBIDDEN.',
    SPAWN_WHEN,
  ].join('\n\n'),
  modes: ['task'],
  input: {
    task_id: z.uuid().describe('Full UUID of the direct child task.'),
    prompt: text({ min: 1, max: Limits.prompt })
      .optional()
      .describe('First prompt of the new session; without one the agent waits (queued messages go first).'),
    agent: text({ min: 1, max: Limits.agent }).optional().describe("Agent to run (default: the child's agent)."),
  },
  annotations: { title: 'Start a new session on a child task', readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async run(args, ctx) {
    return request(
      ctx.nc,
      OrchMcpCoord.spawnSession,
      {
        caller_task_id: ctx.caller.task_id,
        agent_token: ctx.callerToken,
        task_id: args.task_id,
        ...(args.prompt !== undefined ? { prompt: args.prompt } : {}),
        ...(args.agent !== undefined ? { agent: args.agent } : {}),
      },
      { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs },
    );
  },
});
