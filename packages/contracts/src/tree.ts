import { z } from 'zod';
import { Actor } from './envelope.js';
import { CostSummary, Hold, Wakeup } from './entities.js';
import { HoldMode, TaskStatus } from './enums.js';
import { endpoint, idempotent } from './endpoints.js';
import { Limits, storableObject, text } from './text.js';

/**
 * Task subtree controls (R-4): tree holds (orchestrator), the wakeup queue and cost events
 * (holds service). The orchestrator owns the task tree, so it owns holds too: a hold, its members'
 * snapshots, their status changes, launch fences and session stops commit in one transaction
 * (docs/decisions/0006-tree-holds-in-the-orchestrator.md).
 */

const id = z.uuid();
const reason = text({ max: Limits.reason }).nullable().optional();

/** Largest subtree a hold may cover: its event carries every member and must fit one NATS message. */
export const MAX_HOLD_MEMBERS = 5000;

/** Wakeup skip reasons of the gate and of hold cancellations. */
export const HoldSkipReasons = { pause: 'tree_paused', cancel: 'tree_cancelled' } as const satisfies Record<HoldMode, string>;
export const skipReasonOf = (mode: HoldMode) => HoldSkipReasons[mode];

/**
 * Every `skip_reason` a finished wakeup may carry (docs/operations.md "Limits and rates"): why it launched
 * nothing. Refusals of the start rule and of the live-session cap are
 * final; `launch_failed` is a launch that kept failing until its attempts ran out.
 */
export const WakeupSkipReasons = {
  treePaused: HoldSkipReasons.pause,
  treeCancelled: HoldSkipReasons.cancel,
  taskCancelled: 'task_cancelled',
  taskArchived: 'task_archived',
  /** The workspace had KANDEV_MAX_LIVE_SESSIONS_PER_WORKSPACE live sessions (CONFLICT `live_sessions_per_workspace`). */
  liveSessionLimit: 'live_session_limit',
  /** Refused for a reason of no name of its own (an orchestrator that predates the reasons). */
  launchRefused: 'launch_refused',
  launchFailed: 'launch_failed',
} as const;
export type WakeupSkipReason = (typeof WakeupSkipReasons)[keyof typeof WakeupSkipReasons];

export const TreeTask = z.object({ id, title: z.string(), status: TaskStatus, depth: z.number().int().nonnegative() });
export const TreePreview = z.object({
  task_count: z.number().int(),
  tasks: z.array(TreeTask),
  active_wakeup_count: z.number().int(),
  active_hold: Hold.nullable(),
});
export type TreePreview = z.infer<typeof TreePreview>;

const TreeCommand = z.object({ actor: Actor, task_id: id, reason });
const HoldResult = z.object({ hold: Hold });

export const OrchTree = {
  preview: endpoint('orch.tree.preview', z.object({ actor: Actor, task_id: id }), TreePreview),
  // Idempotent in effect (B-6, ADR 0062): a repeat holds or releases nothing twice; it answers
  // CONFLICT (already held, nothing to release) where the first one was applied.
  pause: idempotent(endpoint('orch.tree.pause', TreeCommand, HoldResult)),
  resume: idempotent(endpoint('orch.tree.resume', TreeCommand, HoldResult)),
  cancel: idempotent(endpoint('orch.tree.cancel', TreeCommand, HoldResult)),
  restore: idempotent(endpoint('orch.tree.restore', TreeCommand, HoldResult)),
  /** A task and its ancestors, root first (the holds service's cost projection needs the path). */
  lineage: endpoint('orch.task.lineage', z.object({ actor: Actor, task_id: id }), z.array(z.object({ id, workspace_id: id, parent_id: id.nullable() }))),
  /**
   * The wakeup dispatcher asks for a session. Idempotent by wakeup id (a retried dispatch finds the
   * session it started). A task in an active hold is refused: `{launched: false, hold_mode}`.
   */
  wakeupLaunch: endpoint(
    'orch.wakeup.launch',
    z.object({ wakeup_id: id, task_id: id, prompt: text({ min: 1, max: Limits.prompt }).optional() }),
    z.discriminatedUnion('launched', [
      /** `joined`: a start of the task was already in flight (or a session live) and this wakeup coalesced into it (ADR 0060). */
      z.object({ launched: z.literal(true), session_id: id, joined: z.boolean().optional() }),
      /** `skip_reason`: the start rule's reason (`task_cancelled`, `tree_paused`, …); optional for replicas that predate it. */
      z.object({ launched: z.literal(false), hold_mode: HoldMode.nullable(), reason: z.string(), skip_reason: z.string().optional() }),
    ]),
  ),
} as const;

// ---------------------------------------------------------------- holds service
export const CostEventInput = z.object({
  task_id: id,
  session_id: id.nullable().optional(),
  usage_event_id: text({ min: 1, max: 200 }),
  model: text({ max: 200 }).nullable().optional(),
  cost_cents: z.number().nonnegative().finite(),
  tokens_in: z.number().int().nonnegative(),
  tokens_cached_in: z.number().int().nonnegative(),
  tokens_out: z.number().int().nonnegative(),
  occurred_at: z.iso.datetime({ offset: true }).optional(),
  /** False when the model has no price: the event counts tokens at cost 0 and the summary says how many such events it holds. */
  priced: z.boolean().optional(),
});
export const CostEvent = CostEventInput.extend({
  id,
  session_id: id.nullable(),
  model: z.string().nullable(),
  occurred_at: z.string(),
  priced: z.boolean(),
  /** True when this usage_event_id was already recorded: counted once (B-5). */
  duplicate: z.boolean(),
});
export type CostEvent = z.infer<typeof CostEvent>;

export const Holds = {
  wakeupCreate: endpoint(
    'holds.wakeup.create',
    z.object({
      actor: Actor,
      task_id: id,
      reason: text({ min: 1, max: 200 }),
      /** Free-form; every string in it (keys too) is storable text, as everywhere (docs/limits.md). */
      payload: storableObject({ keyMax: 200 }).optional(),
      idempotency_key: text({ min: 1, max: Limits.idempotencyKey }).optional(),
      /** Not dispatched before this instant (a scheduled wakeup); default: at once. */
      run_at: z.iso.datetime({ offset: true }).optional(),
    }),
    Wakeup,
  ),
  wakeupGet: endpoint('holds.wakeup.get', z.object({ actor: Actor, wakeup_id: id }), Wakeup),
  /** Queued or claimed wakeups of these tasks (the preview's active_wakeup_count). */
  wakeupCount: endpoint('holds.wakeup.count', z.object({ task_ids: z.array(id).max(MAX_HOLD_MEMBERS) }), z.object({ count: z.number().int() })),
  costRecord: endpoint('holds.cost.record', CostEventInput.extend({ actor: Actor }), CostEvent),
  costSummary: endpoint('holds.cost.summary', z.object({ actor: Actor, task_id: id }), CostSummary),
  /**
   * The orchestrator committed a hold: gate its members and cancel their queued and claimed
   * wakeups. Idempotent by hold id; the tree_hold.created event is the backstop when this is lost.
   */
  holdApplied: endpoint('holds.hold.applied', z.object({ hold: Hold }), z.object({ cancelled_wakeups: z.number().int() })),
  /** The orchestrator released a hold: its members are no longer gated. Idempotent. */
  holdReleased: endpoint('holds.hold.released', z.object({ hold: Hold }), z.object({ released: z.boolean() })),
} as const;
