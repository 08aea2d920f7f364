import { z } from 'zod';
import { Actor, OperatorActor } from './envelope.js';
import { ClarificationBundle } from './entities.js';
import { endpoint } from './endpoints.js';
import { Limits, text } from './text.js';

/** The calling agent's own token, forwarded by the mcp service and verified by the orchestrator (docs/security.md). */
const agentToken = text({ min: 1, max: Limits.token }).optional();

/*
 * Clarifications: an agent asks questions over MCP, an operator answers, skips
 * ("rejected") or cancels them over HTTP. The orchestrator owns bundles and questions; the mcp
 * service holds the agent's tool call open while it renews a waiter lease on the bundle.
 */

const id = z.uuid();
const ts = z.string();

export const QUESTION_LIMITS = { questions: 20, text: 4_000, options: 20, option: 500, answer: 20_000, questionId: 100, reason: 2_000 } as const;

/** A question as the agent asks it; `id` defaults to `q<position>`. */
export const QuestionAsked = z.object({
  id: text({ min: 1, max: QUESTION_LIMITS.questionId }).optional(),
  text: text({ min: 1, max: QUESTION_LIMITS.text }),
  options: z
    .array(text({ min: 1, max: QUESTION_LIMITS.option }))
    .max(QUESTION_LIMITS.options)
    .optional(),
});
export type QuestionAsked = z.infer<typeof QuestionAsked>;

export const Answer = z.object({ question_id: text({ min: 1, max: QUESTION_LIMITS.questionId }), answer: text({ max: QUESTION_LIMITS.answer }) });
export type Answer = z.infer<typeof Answer>;

/**
 * The pinned bundle shape plus what an operator (and the waiting tool call) needs to know about
 * its waiter. Every added field is derived from the bundle row and the session's turns.
 */
export const ClarificationBundleView = ClarificationBundle.extend({
  workspace_id: id,
  created_at: ts,
  /** When the waiting tool call gives up and the still-pending questions become `expired`. */
  expires_at: ts,
  closed_at: ts.nullable(),
  /** Why it was rejected or cancelled, when the operator said. */
  reason: z.string().nullable(),
  /** A tool call is holding this bundle open right now (pending, lease valid, turn open, not superseded or detached). */
  waiter_live: z.boolean(),
  /** The waiter is gone for good (turn cancelled or ended, session stopped, mcp instance lost, superseded). */
  detached: z.boolean(),
  detached_reason: z.string().nullable(),
  /** Its turn is no longer the session's newest: history, never active. */
  superseded: z.boolean(),
  /** Pending and not superseded: the bundle an operator should see for its session. */
  active: z.boolean(),
  /** Closed while a live waiter held it: the agent got the outcome. Null while pending. */
  agent_resumed: z.boolean().nullable(),
});
export type ClarificationBundleView = z.infer<typeof ClarificationBundleView>;

export const TaskClarifications = z.object({
  /** The newest active bundle of the task's sessions, or null. */
  active: ClarificationBundleView.nullable(),
  /** Every bundle of the task, newest first. */
  bundles: z.array(ClarificationBundleView),
});
export type TaskClarifications = z.infer<typeof TaskClarifications>;

export const OrchClarification = {
  get: endpoint('orch.clarification.get', z.object({ actor: Actor, bundle_id: id }), ClarificationBundleView),
  /** `{answers: [...]}` answers; `{rejected: true, reason?}` is "Skip all questions". Exactly one of the two. */
  respond: endpoint(
    'orch.clarification.respond',
    z
      .object({
        actor: OperatorActor,
        bundle_id: id,
        answers: z.array(Answer).min(1).max(QUESTION_LIMITS.questions).optional(),
        rejected: z.literal(true).optional(),
        reason: text({ max: QUESTION_LIMITS.reason }).nullable().optional(),
      })
      .refine((b) => (b.answers !== undefined) !== (b.rejected === true), { message: 'give either answers or rejected: true', path: ['answers'] }),
    ClarificationBundleView,
  ),
  cancel: endpoint(
    'orch.clarification.cancel',
    z.object({ actor: OperatorActor, bundle_id: id, reason: text({ max: QUESTION_LIMITS.reason }).nullable().optional() }),
    ClarificationBundleView,
  ),
  ofTask: endpoint('orch.task.clarifications', z.object({ actor: Actor, task_id: id }), TaskClarifications),
} as const;

/**
 * The waiter's side (only the mcp service may publish on kandev.orch.mcp.>). `ask` persists the
 * bundle and takes the first lease; `renew` extends it and reports the bundle; `expire` closes a
 * bundle whose wait ran out. Timing lives with the bundles: the orchestrator answers how long to
 * wait and how often to renew, so every mcp replica behaves the same.
 */
export const ClarificationWait = z.object({
  bundle: ClarificationBundleView,
  /** Milliseconds from now until the wait ends (0 once closed). */
  expires_in_ms: z.number().int().nonnegative(),
  /** Renew at this interval; the lease lasts three of them. */
  renew_every_ms: z.number().int().positive(),
});
export type ClarificationWait = z.infer<typeof ClarificationWait>;

export const OrchMcpClarification = {
  ask: endpoint(
    'orch.mcp.clarification.ask',
    z.object({
      caller_task_id: id,
      agent_token: agentToken,
      /** From the agent's token; without it the task's session with a turn in flight is used. */
      caller_session_id: id.optional(),
      questions: z.array(QuestionAsked).min(1).max(QUESTION_LIMITS.questions),
    }),
    ClarificationWait,
  ),
  renew: endpoint('orch.mcp.clarification.renew', z.object({ caller_task_id: id, agent_token: agentToken, bundle_id: id }), ClarificationWait),
  expire: endpoint('orch.mcp.clarification.expire', z.object({ caller_task_id: id, agent_token: agentToken, bundle_id: id }), ClarificationWait),
  /** The waiting call's client went away (cancelled the call, or its connection closed): detach now, not when the lease lapses. */
  release: endpoint('orch.mcp.clarification.release', z.object({ caller_task_id: id, agent_token: agentToken, bundle_id: id }), ClarificationWait),
} as const;

/**
 * What the waiting `ask_user_questions` call returns (INTERFACES: answers, or `{"rejected": true}`).
 * Every outcome is a typed result, not a tool error: the agent reads it and carries on.
 */
export const AskOutcome = z.object({
  bundle_id: id,
  status: z.enum(['answered', 'rejected', 'cancelled', 'expired', 'detached']),
  answers: z.array(Answer),
  questions: z.array(ClarificationBundle.shape.questions.element),
  rejected: z.literal(true).optional(),
  cancelled: z.literal(true).optional(),
  expired: z.literal(true).optional(),
  detached: z.literal(true).optional(),
  reason: z.string().nullable().optional(),
});
export type AskOutcome = z.infer<typeof AskOutcome>;
