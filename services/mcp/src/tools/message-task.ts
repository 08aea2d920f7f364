import { DeliveryMode, Limits, OrchMcp, text } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { z } from 'zod';
import { CHOOSING_TABLE, PREFER_INTERRUPT_OR_STOP, RESTART_HINT } from '../domain/guidance.js';
import { defineTool } from './tool.js';

/** queued or interrupting message to a child task. */
export const messageTaskTool = defineTool({
  name: 'message_task_kandev',
  title: 'Message a child task (queued or interrupt)',
  description: [
    'Send a prompt to a child task. Returns {"task_id", "session_id", "status": "queued" | "sent" | "started"}.',
    'delivery_mode="queued" (the default) appends the message FIFO and lets the current turn continue (status "queued"). ' +
      'delivery_mode="interrupt" (direct children only) cancels the running turn and dispatches this exact message at once ' +
      '(status "sent"); if it cannot land safely it stays queued and the status says "queued". ' +
      'An idle child receives the message immediately ("sent", or "started" when a session had to start). ' +
      'A full queue is a CONFLICT error that reports the queue size and limit.',
    'Who may send: interrupt only to your direct children. A queued message may go to any task in your workspace ' +
      '(a child, your parent, a sibling, yourself); if that task has no active session, one is started with the message.',
    PREFER_INTERRUPT_OR_STOP,
    CHOOSING_TABLE,
    RESTART_HINT,
  ].join('\n\n'),
  modes: ['task'],
  input: {
    task_id: z.uuid().describe('Full UUID of the child task.'),
    prompt: text({ min: 1, max: Limits.prompt }).describe('The message for the child agent.'),
    session_id: z.uuid().optional().describe("A specific session of the child; default: the child's primary session."),
    delivery_mode: DeliveryMode.optional().describe(
      '"queued" (default): information that can wait. "interrupt": stop the current approach and act on this now.',
    ),
    idempotency_key: text({ min: 1, max: Limits.idempotencyKey })
      .optional()
      .describe('Any unique string. Retrying with the same key (e.g. after a timeout) returns the first answer and queues nothing more.'),
  },
  annotations: {
    title: 'Message a child task (queued or interrupt)',
    readOnlyHint: false,
    // An interrupt cancels the child's running turn.
    destructiveHint: true,
    idempotentHint: false,
    openWorldHint: false,
  },
  async run(args, ctx) {
    return request(
      ctx.nc,
      OrchMcp.messageTask,
      {
        caller_task_id: ctx.caller.task_id,
        agent_token: ctx.callerToken,
        task_id: args.task_id,
        prompt: args.prompt,
        ...(args.session_id !== undefined ? { session_id: args.session_id } : {}),
        ...(args.delivery_mode !== undefined ? { delivery_mode: args.delivery_mode } : {}),
        ...(args.idempotency_key !== undefined ? { idempotency_key: args.idempotency_key } : {}),
      },
      { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs },
    );
  },
});
