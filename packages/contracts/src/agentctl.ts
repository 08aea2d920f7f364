import { z } from 'zod';

/*
 * agentctl's wire contract: the HTTP bodies of its loopback API and the NDJSON lines it writes to
 * stdout for its parent (the lifecycle service). Every name carries the `Agentctl` prefix because the
 * contracts index re-exports this file next to the NATS-level schemas.
 */

export const AgentctlPaths = {
  prompt: '/api/v1/acp/prompt',
  cancel: '/api/v1/acp/cancel',
  permission: '/api/v1/acp/permission',
  stop: '/api/v1/stop',
  status: '/api/v1/status',
  health: '/healthz',
} as const;

/**
 * Every route of agentctl's API (method + path). All but `GET /healthz` require
 * `Authorization: Bearer <execution secret>`; without it: 401 UNAUTHORIZED, nothing changed.
 */
export const AgentctlRoutes = [
  { method: 'GET', path: AgentctlPaths.health, authenticated: false },
  { method: 'GET', path: AgentctlPaths.status, authenticated: true },
  { method: 'POST', path: AgentctlPaths.prompt, authenticated: true },
  { method: 'POST', path: AgentctlPaths.cancel, authenticated: true },
  { method: 'POST', path: AgentctlPaths.permission, authenticated: true },
  { method: 'POST', path: AgentctlPaths.stop, authenticated: true },
] as const;

export const AgentctlProtocol = z.enum(['acp', 'codex']);
export type AgentctlProtocol = z.infer<typeof AgentctlProtocol>;

/** `ready` until a turn starts, `running` while one is in flight, `stopping` during teardown, `exited` once the agent is gone. */
export const AgentctlState = z.enum(['ready', 'running', 'stopping', 'exited']);
export type AgentctlState = z.infer<typeof AgentctlState>;

/** ACP stop reasons as the agent reports them; Codex statuses are normalised onto them, and `error` covers a failed turn. */
export const AgentctlStopReason = z.enum(['end_turn', 'max_tokens', 'max_turn_requests', 'refusal', 'cancelled', 'error']);
export type AgentctlStopReason = z.infer<typeof AgentctlStopReason>;

const nonEmpty = z.string().min(1);
const count = z.number().int().nonnegative();

// ---------------------------------------------------------------- errors

export const AgentctlErrorCode = z.enum(['BAD_REQUEST', 'UNAUTHORIZED', 'VALIDATION_ERROR', 'NOT_FOUND', 'CONFLICT', 'UNAVAILABLE', 'INTERNAL_ERROR']);
export type AgentctlErrorCode = z.infer<typeof AgentctlErrorCode>;

export const AgentctlErrorResponse = z.object({
  error: z.object({
    code: AgentctlErrorCode,
    message: z.string(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
});
export type AgentctlErrorResponse = z.infer<typeof AgentctlErrorResponse>;

// ---------------------------------------------------------------- HTTP bodies

/** `turn_id` is the caller's id for the turn; agentctl mints one when it is absent. */
export const AgentctlPromptRequest = z.object({
  prompt: nonEmpty,
  turn_id: nonEmpty.optional(),
  /** Sent to the agent as its own text block before the prompt (e.g. which task sent this message). */
  context: z.string().min(1).max(10_000).optional(),
});
export type AgentctlPromptRequest = z.infer<typeof AgentctlPromptRequest>;

export const AgentctlPromptResponse = z.object({ turn_id: nonEmpty });
export type AgentctlPromptResponse = z.infer<typeof AgentctlPromptResponse>;

/** `turn_id` fences the cancel to the turn the caller captured; a different in-flight turn is a CONFLICT. */
export const AgentctlCancelRequest = z.object({ turn_id: nonEmpty.optional() });
export type AgentctlCancelRequest = z.infer<typeof AgentctlCancelRequest>;

export const AgentctlCancelResponse = z.discriminatedUnion('cancelled', [
  z.object({ cancelled: z.literal(false), reason: z.literal('no_active_turn') }),
  z.object({ cancelled: z.literal(true), turn_id: nonEmpty, stop_reason: AgentctlStopReason }),
]);
export type AgentctlCancelResponse = z.infer<typeof AgentctlCancelResponse>;

export const AgentctlPermissionDecision = z.enum(['allow', 'deny']);
export type AgentctlPermissionDecision = z.infer<typeof AgentctlPermissionDecision>;

/**
 * Answers a pending permission request (ACP `session/request_permission`, Codex approval): with one
 * of the options the agent offered (`option_id`), the first allowing or rejecting one (`decision`),
 * or the protocol's cancelled outcome (`cancel: true`). Exactly one of the three. A request is
 * settled once: the same answer again is answered the same (a retry), any other is CONFLICT with
 * `details: {outcome, option_id}` saying how it ended; an id agentctl never issued is NOT_FOUND.
 */
export const AgentctlPermissionAnswerRequest = z
  .object({
    permission_id: nonEmpty,
    decision: AgentctlPermissionDecision.optional(),
    option_id: nonEmpty.optional(),
    cancel: z.literal(true).optional(),
  })
  .refine((b) => [b.decision !== undefined, b.option_id !== undefined, b.cancel === true].filter(Boolean).length === 1, {
    message: 'give exactly one of decision, option_id, cancel: true',
    path: ['decision'],
  });
export type AgentctlPermissionAnswerRequest = z.infer<typeof AgentctlPermissionAnswerRequest>;

export const AgentctlPermissionOutcome = z.enum(['allowed', 'denied', 'cancelled']);
export type AgentctlPermissionOutcome = z.infer<typeof AgentctlPermissionOutcome>;

export const AgentctlPermissionAnswerResponse = z.object({
  permission_id: nonEmpty,
  outcome: AgentctlPermissionOutcome,
  /** The option the agent was given; null for the cancelled outcome. */
  option_id: z.string().nullable().optional(),
});
export type AgentctlPermissionAnswerResponse = z.infer<typeof AgentctlPermissionAnswerResponse>;

export const AgentctlStopRequest = z.object({
  grace_ms: count.max(600_000).default(2000),
});
export type AgentctlStopRequest = z.infer<typeof AgentctlStopRequest>;

export const AgentctlStopResponse = z.object({
  stopped: z.literal(true),
  /** `graceful`: the agent was gone before SIGKILL was needed; `killed`: it outlived the grace period. */
  how: z.enum(['graceful', 'killed']),
  agent_pid: z.number().int(),
  grace_ms: count,
  exit_code: z.number().int().nullable(),
  signal: z.string().nullable(),
});
export type AgentctlStopResponse = z.infer<typeof AgentctlStopResponse>;

export const AgentctlStatusResponse = z.object({
  execution_id: z.string().nullable(),
  protocol: AgentctlProtocol,
  agent_pid: z.number().int(),
  state: AgentctlState,
  turn_id: z.string().nullable(),
});
export type AgentctlStatusResponse = z.infer<typeof AgentctlStatusResponse>;

// ---------------------------------------------------------------- stdout events (one JSON object per line)

/** The first line on stdout: the agent is up and the HTTP server listens. */
export const AgentctlReadyEvent = z.object({
  type: z.literal('ready'),
  url: z.url(),
  agent_pid: z.number().int(),
  protocol: AgentctlProtocol,
});
export type AgentctlReadyEvent = z.infer<typeof AgentctlReadyEvent>;

export const AgentctlTurnStartedEvent = z.object({
  type: z.literal('turn_started'),
  turn_id: nonEmpty,
});
export type AgentctlTurnStartedEvent = z.infer<typeof AgentctlTurnStartedEvent>;

export const AgentctlTurnCompletedEvent = z.object({
  type: z.literal('turn_completed'),
  turn_id: nonEmpty,
  stop_reason: AgentctlStopReason,
  /** Why the turn failed, only with `stop_reason: "error"`. */
  error: z.string().optional(),
});
export type AgentctlTurnCompletedEvent = z.infer<typeof AgentctlTurnCompletedEvent>;

/** One streamed chunk of the agent's reply (ACP `agent_message_chunk`, Codex `item/agentMessage/delta`). */
export const AgentctlAgentMessageEvent = z.object({
  type: z.literal('agent_message'),
  turn_id: nonEmpty,
  text: z.string(),
});
export type AgentctlAgentMessageEvent = z.infer<typeof AgentctlAgentMessageEvent>;

/** One usage report, as a delta; `usage_event_id` is unique per report so a cost event is counted once. */
export const AgentctlUsageEvent = z.object({
  type: z.literal('usage'),
  turn_id: nonEmpty,
  usage_event_id: nonEmpty,
  cost_cents: z.number().nonnegative(),
  tokens_in: count,
  tokens_cached_in: count,
  tokens_out: count,
  /** The model the tokens were spent on, when the agent names it (Codex's thread model). */
  model: z.string().min(1).optional(),
  /**
   * false: the agent reported tokens only and the model has no row in pricing.ts, so cost_cents is
   * 0 and means "unpriced", not "free". Absent or true: cost_cents is the agent's own figure or
   * the price table's.
   */
  priced: z.boolean().optional(),
});
export type AgentctlUsageEvent = z.infer<typeof AgentctlUsageEvent>;

/**
 * One tool call of the agent (ACP `tool_call` / `tool_call_update`, Codex `item/started` /
 * `item/completed` of a command, file change or MCP tool call): `started` once, then `completed` or
 * `failed` with the output. `text` is the input (started) or output (ended), cut to 64 KiB.
 */
export const AgentctlToolCallEvent = z.object({
  type: z.literal('tool_call'),
  turn_id: nonEmpty,
  tool_call_id: nonEmpty,
  phase: z.enum(['started', 'completed', 'failed']),
  title: z.string().nullable(),
  kind: z.string().nullable(),
  text: z.string(),
});
export type AgentctlToolCallEvent = z.infer<typeof AgentctlToolCallEvent>;

export const AgentctlPermissionRequestedEvent = z.object({
  type: z.literal('permission_requested'),
  turn_id: nonEmpty.nullable(),
  permission_id: nonEmpty,
  title: z.string(),
  options: z.array(z.object({ id: z.string(), name: z.string(), kind: z.string() })),
});
export type AgentctlPermissionRequestedEvent = z.infer<typeof AgentctlPermissionRequestedEvent>;

export const AgentctlPermissionResolvedEvent = z.object({
  type: z.literal('permission_resolved'),
  turn_id: nonEmpty.nullable(),
  permission_id: nonEmpty,
  outcome: AgentctlPermissionOutcome,
  /** The option the agent was given, when one was (absent for the cancelled outcome). */
  option_id: z.string().optional(),
});
export type AgentctlPermissionResolvedEvent = z.infer<typeof AgentctlPermissionResolvedEvent>;

/** The last line: the agent process is gone (on its own or by a stop); agentctl exits right after. */
export const AgentctlAgentExitedEvent = z.object({
  type: z.literal('agent_exited'),
  code: z.number().int().nullable(),
  signal: z.string().nullable(),
  /**
   * Set when agentctl itself stopped the agent without a stop request: its owner went silent past
   * --owner-silence-ms (`owner_silent`), its stdin closed (`owner_gone`), or it got SIGTERM/SIGINT (`signal`).
   */
  stopped_by: z.enum(['owner_silent', 'owner_gone', 'signal']).optional(),
});
export type AgentctlAgentExitedEvent = z.infer<typeof AgentctlAgentExitedEvent>;

export const AgentctlEvent = z.discriminatedUnion('type', [
  AgentctlReadyEvent,
  AgentctlTurnStartedEvent,
  AgentctlTurnCompletedEvent,
  AgentctlAgentMessageEvent,
  AgentctlUsageEvent,
  AgentctlToolCallEvent,
  AgentctlPermissionRequestedEvent,
  AgentctlPermissionResolvedEvent,
  AgentctlAgentExitedEvent,
]);
export type AgentctlEvent = z.infer<typeof AgentctlEvent>;
