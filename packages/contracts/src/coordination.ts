import { z } from 'zod';
import { endpoint } from './endpoints.js';
import { HoldMode, SessionState, TaskStatus } from './enums.js';
import { TranscriptKind, TranscriptRole } from './read.js';
import { Limits, text } from './text.js';

/*
 * what a coordinating agent reads about its direct children and how it restarts one
 * (list_tasks_kandev, get_task_conversation_kandev, spawn_session_kandev). Same caller rules as
 * the stop: the caller is the agent token's task, verified by the orchestrator; only the
 * target's direct parent in its workspace gets an answer. ADR 0064.
 */

const id = z.uuid();
const agentToken = text({ min: 1, max: Limits.token }).optional();

/** Bounds of a conversation page over MCP (docs/operations.md "Limits"): a model's context is the scarce thing. */
export const ConversationLimits = {
  /** Items per page when `limit` is not given. */
  defaultItems: 50,
  /** Most items per page; a larger `limit` is clamped. */
  maxItems: 200,
  /** Most UTF-8 bytes of item text per page; the item that would pass it is cut (`truncated: true`) or left for the next page. */
  maxBytes: 64 * 1024,
} as const;

/** One child of the caller, as list_tasks_kandev shows it. */
export const ChildSummary = z.object({
  id,
  title: z.string(),
  status: TaskStatus,
  /** The child's newest live (active) session, or null. */
  session: z.object({ id, state: SessionState }).nullable(),
  /** The active tree hold covering the child, or null. */
  hold: z.object({ id, mode: HoldMode }).nullable(),
  /** Questions (ask_user_questions) of the child still waiting for the operator. */
  pending_questions: z.number().int().nonnegative(),
  /** Permission requests of the child still waiting for the operator. */
  pending_permissions: z.number().int().nonnegative(),
});
export type ChildSummary = z.infer<typeof ChildSummary>;

export const ChildConversationItem = z.object({
  seq: z.number().int().positive(),
  role: TranscriptRole,
  kind: TranscriptKind,
  text: z.string(),
  created_at: z.string(),
  /** Present (true) when this item's text was cut to fit the page's byte bound. */
  truncated: z.literal(true).optional(),
});
export type ChildConversationItem = z.infer<typeof ChildConversationItem>;

export const ChildConversation = z.object({
  task_id: id,
  /** The child's latest session, or null when it never had one (then `items` is empty). */
  session_id: id.nullable(),
  items: z.array(ChildConversationItem),
  /** Pass as `after_seq` for the next page; null when this page reached the end. */
  next_seq: z.number().int().nonnegative().nullable(),
});
export type ChildConversation = z.infer<typeof ChildConversation>;

export const SpawnResult = z.object({ task_id: id, session_id: id, status: z.literal('started') });
export type SpawnResult = z.infer<typeof SpawnResult>;

export const OrchMcpCoord = {
  listChildren: endpoint('orch.mcp.list_children', z.object({ caller_task_id: id, agent_token: agentToken }), z.object({ tasks: z.array(ChildSummary) })),
  childConversation: endpoint(
    'orch.mcp.child_conversation',
    z.object({
      caller_task_id: id,
      agent_token: agentToken,
      task_id: id,
      after_seq: z.number().int().nonnegative().optional(),
      limit: z.number().int().min(1).optional(),
    }),
    ChildConversation,
  ),
  spawnSession: endpoint(
    'orch.mcp.spawn_session',
    z.object({
      caller_task_id: id,
      agent_token: agentToken,
      task_id: id,
      prompt: text({ min: 1, max: Limits.prompt }).optional(),
      agent: text({ min: 1, max: Limits.agent }).optional(),
    }),
    SpawnResult,
  ),
} as const;

/**
 * the limits an agent cannot exceed, named in `details.limit` of the CONFLICT that refuses
 * past them (with `details.max` and `details.current`). Settings and defaults: docs/operations.md.
 */
export const LimitName = z.enum(['children_per_task', 'tree_depth', 'live_sessions_per_workspace', 'pending_questions_per_session']);
export type LimitName = z.infer<typeof LimitName>;

/**
 * request rates (ADR 0065): one fixed-window counter per token, the same on the gateway
 * (@fastify/rate-limit) and the MCP service (rate-limiter-flexible). A token may make `burst`
 * requests per window of `burst / rate` seconds, so `rate` per second on average with `burst` at
 * once. Each replica counts alone, with the cluster's allowance split among `replicas`: a token
 * whose requests spread over the replicas gets `rate`; one whose requests all land on one replica
 * gets `rate / replicas` (the error this scheme allows, never more than `rate`). `rate` 0 = no limit.
 */
export function rateWindow(opts: { rate: number; burst: number; replicas: number }): { points: number; windowMs: number } | null {
  if (opts.rate <= 0) return null;
  const burst = Math.max(opts.burst, opts.rate, 1);
  return { points: Math.max(1, Math.ceil(burst / Math.max(1, opts.replicas))), windowMs: Math.ceil((burst / opts.rate) * 1000) };
}
