import { Limits, OrchMcp, text } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { defineTool } from './tool.js';

/** a coordinator creates a child of itself, optionally starting it with a prompt. */
export const createTaskTool = defineTool({
  name: 'create_task_kandev',
  title: 'Create a child task',
  description:
    'Create a child task of your task in your workspace. With a prompt, a session starts at once and works on it. ' +
    'Returns the child task (with "session_id" when a session was started). ' +
    'Steer it later with message_task_kandev and halt it with stop_task_kandev.',
  modes: ['task'],
  input: {
    title: text({ min: 1, max: Limits.title }).describe('Short title of the child task.'),
    description: text({ max: Limits.description }).optional().describe('Longer description of the work.'),
    agent: text({ min: 1, max: Limits.agent })
      .optional()
      .describe('Agent to run it (default: the workspace default). An unknown agent is refused before anything is created.'),
    prompt: text({ min: 1, max: Limits.prompt }).optional().describe('First prompt; when given, the child starts working immediately.'),
    idempotency_key: text({ min: 1, max: Limits.idempotencyKey })
      .optional()
      .describe('Any unique string. Retrying with the same key (e.g. after a timeout) returns the first child instead of creating another.'),
  },
  annotations: {
    title: 'Create a child task',
    readOnlyHint: false,
    destructiveHint: false,
    idempotentHint: false,
    openWorldHint: false,
  },
  async run(args, ctx) {
    return request(
      ctx.nc,
      OrchMcp.createTask,
      {
        caller_task_id: ctx.caller.task_id,
        agent_token: ctx.callerToken,
        title: args.title,
        ...(args.description !== undefined ? { description: args.description } : {}),
        ...(args.agent !== undefined ? { agent: args.agent } : {}),
        ...(args.prompt !== undefined ? { prompt: args.prompt } : {}),
        ...(args.idempotency_key !== undefined ? { idempotency_key: args.idempotency_key } : {}),
      },
      { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs },
    );
  },
});
