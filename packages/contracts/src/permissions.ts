import { z } from 'zod';
import { Actor, OperatorActor } from './envelope.js';
import { endpoint, instanceEndpoint } from './endpoints.js';
import { Limits, text } from './text.js';

/*
 * Permission requests (SPEC ): an agent asks before a tool call (ACP
 * `session/request_permission`, Codex `item/commandExecution/requestApproval` and
 * `item/fileChange/requestApproval`), agentctl holds the agent's request open, the operator answers
 * it. The orchestrator owns the rows; the lifecycle relays agentctl's lines as `agent.permission_*`
 * events and carries the operator's answer to the owning agentctl.
 */

const id = z.uuid();
const ts = z.string();

/** What an agent's request may carry: longer titles and more options are cut by the lifecycle. */
export const PERMISSION_LIMITS = { title: 2_000, options: 20, optionId: 200, optionName: 500, optionKind: 100 } as const;

export const PermissionStatus = z.enum(['pending', 'answered', 'cancelled']);
export type PermissionStatus = z.infer<typeof PermissionStatus>;

/** One choice the agent offered (ACP `PermissionOption`; Codex decisions), under its own id. */
export const PermissionOption = z.object({
  option_id: z.string().min(1).max(PERMISSION_LIMITS.optionId),
  name: z.string().max(PERMISSION_LIMITS.optionName),
  /** ACP's kinds: `allow_once`, `allow_always`, `reject_once`, `reject_always` (Codex decisions are mapped onto them). */
  kind: z.string().max(PERMISSION_LIMITS.optionKind),
});
export type PermissionOption = z.infer<typeof PermissionOption>;

/**
 * A permission request as INTERFACES pins it (`id, session_id, turn_id, title, options, status,
 * chosen_option_id, created_at, closed_at`) plus where it lives and who closed it.
 */
export const PermissionRequest = z.object({
  id,
  workspace_id: id,
  task_id: id,
  session_id: id,
  turn_id: id.nullable(),
  execution_id: id,
  /** agentctl's id for the request (what the answer names on the agent's side). */
  permission_id: z.string().min(1),
  title: z.string(),
  options: z.array(PermissionOption),
  status: PermissionStatus,
  chosen_option_id: z.string().nullable(),
  created_at: ts,
  closed_at: ts.nullable(),
  /** `operator:<sub>`, or `system:<why>` when a turn cancel, a stop or the agent's end closed it. */
  closed_by: z.string().nullable(),
});
export type PermissionRequest = z.infer<typeof PermissionRequest>;

/**
 * The `permission.requested` / `permission.closed` event data (and so the WebSocket payload): the
 * row's fields at the top level, and the same row again under `permission`, as a clarification
 * event carries its `bundle`.
 */
export const PermissionEventData = PermissionRequest.extend({ permission: PermissionRequest });
export type PermissionEventData = z.infer<typeof PermissionEventData>;

export const permissionEventData = (row: PermissionRequest): PermissionEventData => ({ ...row, permission: row });

export const OrchPermission = {
  /** GET /tasks/:id/permissions: pending first, then newest first. */
  ofTask: endpoint('orch.task.permissions', z.object({ actor: Actor, task_id: id }), z.array(PermissionRequest)),
  /** POST /permissions/:id/respond: `{option_id}` or `{cancelled: true}`, exactly one. */
  respond: endpoint(
    'orch.permission.respond',
    z
      .object({
        actor: OperatorActor,
        permission_request_id: id,
        option_id: text({ min: 1, max: PERMISSION_LIMITS.optionId }).optional(),
        cancelled: z.literal(true).optional(),
        reason: text({ max: Limits.reason }).nullable().optional(),
      })
      .refine((b) => (b.option_id !== undefined) !== (b.cancelled === true), { message: 'give either option_id or cancelled: true', path: ['option_id'] }),
    PermissionRequest,
  ),
} as const;

/** How agentctl ended a request: an option was chosen (allowed / denied by its kind) or it was cancelled. */
export const AgentPermissionOutcome = z.enum(['allowed', 'denied', 'cancelled']);
export type AgentPermissionOutcome = z.infer<typeof AgentPermissionOutcome>;

/** The lifecycle's answer to `exec.permission.respond`: what agentctl did. */
export const PermissionAnswered = z.object({
  permission_id: z.string().min(1),
  outcome: AgentPermissionOutcome,
  option_id: z.string().nullable(),
});
export type PermissionAnswered = z.infer<typeof PermissionAnswered>;

/** The request as agentctl reported it (the lifecycle's `agent.permission_*` events carry it). */
const AgentPermissionAsked = z.object({
  title: z.string().max(PERMISSION_LIMITS.title),
  options: z.array(PermissionOption).max(PERMISSION_LIMITS.options),
});

/** Event data the lifecycle publishes from agentctl's permission lines (the orchestrator consumes them). */
export const AgentPermissionEventData = {
  'agent.permission_requested': AgentPermissionAsked.extend({ execution_id: id, permission_id: z.string().min(1), turn_id: id.nullable() }),
  /**
   * Carries the request too (`asked`, null when the lifecycle no longer knows it): a consumer that
   * meets the resolution first (a redelivery, N replicas) can still record the row, closed.
   */
  'agent.permission_resolved': z.object({
    execution_id: id,
    permission_id: z.string().min(1),
    turn_id: id.nullable(),
    outcome: AgentPermissionOutcome,
    option_id: z.string().nullable(),
    asked: AgentPermissionAsked.nullable(),
  }),
} as const;

/**
 * The operator's answer, to the lifecycle instance that owns the execution (`kandev.life.<instance>.exec.permission.respond`),
 * which hands it to agentctl. agentctl settles each request once: an answer to one already settled
 * another way is CONFLICT with `details.outcome` / `details.option_id` saying how it ended.
 */
export const LifePermission = {
  respond: instanceEndpoint(
    'life',
    'exec.permission.respond',
    z
      .object({
        execution_id: id,
        permission_id: text({ min: 1, max: 200 }),
        option_id: text({ min: 1, max: PERMISSION_LIMITS.optionId }).optional(),
        cancelled: z.literal(true).optional(),
      })
      .refine((b) => (b.option_id !== undefined) !== (b.cancelled === true), { message: 'give either option_id or cancelled: true', path: ['option_id'] }),
    PermissionAnswered,
  ),
} as const;
