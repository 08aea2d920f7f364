import { OrchMcpClarification, QUESTION_LIMITS, QuestionAsked } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { z } from 'zod';
import { awaitOutcome, closedEvents } from '../clarification-waiter.js';
import { defineTool } from './tool.js';

/** ask the operator questions and wait, within this tool call, for the outcome. */
export const askUserQuestionsTool = defineTool({
  name: 'ask_user_questions',
  title: 'Ask the user questions',
  description: [
    'Ask the operator one or more questions and wait for the response within this call. ' +
      'Give each question a short "id" (default q1, q2, ...) and, when the choice is closed, "options".',
    'Returns {"bundle_id", "status", "answers": [{"question_id", "answer"}], "questions"} where status is "answered"; ' +
      'or {"rejected": true, ...} when the operator skipped the questions: continue with your best judgement; ' +
      '{"cancelled": true} when the request was withdrawn; {"expired": true} when nobody answered in time; ' +
      '{"detached": true} when your turn moved on before an answer came. Questions answered before a skip keep their answers.',
  ].join('\n\n'),
  modes: ['task'],
  input: {
    questions: z.array(QuestionAsked).min(1).max(QUESTION_LIMITS.questions).describe('The questions, in the order to show them.'),
  },
  annotations: {
    title: 'Ask the user questions',
    readOnlyHint: false,
    destructiveHint: false,
    idempotentHint: false,
    openWorldHint: true,
  },
  async run(args, ctx) {
    // Listen for close events before the bundle exists, so its close cannot slip past unseen.
    await closedEvents(ctx.nc).ready;
    const first = await request(
      ctx.nc,
      OrchMcpClarification.ask,
      {
        caller_task_id: ctx.caller.task_id,
        agent_token: ctx.callerToken,
        ...(ctx.caller.session_id ? { caller_session_id: ctx.caller.session_id } : {}),
        questions: args.questions,
      },
      { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs },
    );
    return awaitOutcome(ctx, first);
  },
});
