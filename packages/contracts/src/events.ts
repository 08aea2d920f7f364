import { z } from 'zod';
import { Actor } from './envelope.js';
import { Execution, Hold, QueuedMessage, Session, Task, ClarificationBundle, TreeBudget } from './entities.js';
import { SessionState, TaskStatus } from './enums.js';
import { AgentToolCallData, type InboxChanged, SessionMessageData } from './read.js';
import { AgentPermissionEventData, PermissionEventData } from './permissions.js';

const id = z.uuid();

/** Catalogue of JetStream events: type → data schema. Subject = kandev.evt.<type>. */
export const EventData = {
  'task.created': z.object({ task: Task }),
  'task.state_changed': z.object({ task: Task, from: TaskStatus, to: TaskStatus, reason: z.string().nullable() }),
  'session.state_changed': z.object({ session: Session, from: SessionState.nullable(), to: SessionState, reason: z.string().nullable() }),
  'turn.started': z.object({ execution_id: id, turn_id: id }),
  'turn.completed': z.object({ execution_id: id, turn_id: id, stop_reason: z.string() }),
  'session.agent.cancelled': z.object({ execution_id: id, turn_id: id, stop_reason: z.string() }),
  'agent.message': z.object({ execution_id: id, turn_id: id.nullable(), text: z.string() }),
  'agent.tool_call': AgentToolCallData,
  /** One transcript item, or a chunk appended to one (R-8.2; read.ts). */
  'session.message': SessionMessageData,
  'execution.registered': z.object({ execution: Execution }),
  'execution.ready': z.object({ execution: Execution }),
  'execution.stopped': z.object({
    execution_id: id,
    how: z.enum(['graceful', 'killed', 'exited', 'lost']),
    grace_ms: z.number().int().nonnegative().nullable(),
    reason: z.string(),
    pid: z.number().int().nullable(),
    exit_code: z.number().int().nullable(),
    signal: z.string().nullable(),
    orphaned: z.boolean().optional(),
  }),
  'usage.recorded': z.object({
    execution_id: id,
    usage_event_id: z.string(),
    model: z.string().nullable(),
    cost_cents: z.number(),
    tokens_in: z.number().int(),
    tokens_cached_in: z.number().int(),
    tokens_out: z.number().int(),
    /** false: tokens without a price (the model is not in pricing.ts); cost_cents is 0 and means unpriced. */
    priced: z.boolean().optional(),
  }),
  'queue.changed': z.object({ session_id: id.nullable(), size: z.number().int(), messages: z.array(QueuedMessage) }),
  'tree_hold.created': z.object({ hold: Hold }),
  'tree_hold.released': z.object({ hold: Hold }),
  /** B-8: the tree's cost reached the budget's warn_percent (payload: the budget). */
  'tree_budget.warned': TreeBudget,
  /** B-8: the tree's cost reached the cap; the budget paused the tree (`hold_id`), or found it already held (null). */
  'tree_budget.exceeded': TreeBudget,
  'clarification.requested': z.object({ bundle: ClarificationBundle }),
  'clarification.closed': z.object({ bundle: ClarificationBundle }),
  /**
   * A task needs the operator's attention though its status did not change (ADR 0025): a restore
   * gave it back IN_PROGRESS with nothing running. `reason` is a fixed word (`restored_without_session`).
   */
  'task.attention': z.object({ task: Task, reason: z.string() }),
  'control.recorded': z.object({ action: z.string(), outcome: z.string(), details: z.record(z.string(), z.unknown()) }),
  ...AgentPermissionEventData,
  'permission.requested': PermissionEventData,
  'permission.closed': PermissionEventData,
} as const;
export type EventType = keyof typeof EventData;
export type EventDataOf<T extends EventType> = z.infer<(typeof EventData)[T]>;

export const EventEnvelope = z.object({
  id: z.string().min(1),
  type: z.string(),
  version: z.literal(1),
  occurred_at: z.string(),
  workspace_id: id,
  task_id: id.nullable().optional(),
  session_id: id.nullable().optional(),
  actor: Actor.nullable().optional(),
  data: z.unknown(),
});
export type EventEnvelope<T extends EventType = EventType> = Omit<z.infer<typeof EventEnvelope>, 'type' | 'data'> & {
  type: T;
  data: EventDataOf<T>;
};

/** Events the gateway pushes to subscribed WebSocket clients (a pinned public surface). */
export const PUSHED_EVENT_TYPES: readonly EventType[] = [
  'task.created',
  'task.state_changed',
  'session.state_changed',
  'session.agent.cancelled',
  'execution.stopped',
  'tree_hold.created',
  'tree_hold.released',
  'clarification.requested',
  'clarification.closed',
  'queue.changed',
  'session.message',
  'task.attention',
  'permission.requested',
  'permission.closed',
  'tree_budget.warned',
  'tree_budget.exceeded',
];

/** What the gateway adds to every pushed event's data: where and when it happened. */
export interface PushContext {
  workspace_id: string;
  task_id: string | null;
  session_id: string | null;
  event_id: string;
  occurred_at: string;
}

/**
 * What `/ws` pushes to a subscriber (a frame of `type: "notification"`): one event, `action` its
 * type and `payload` its data plus the PushContext, or `inbox.changed` (InboxChanged). Narrowing on
 * `action` types the payload, so a change of an event's data reaches every reader (the console too).
 */
export type PushNotification =
  | { [T in EventType]: { type: 'notification'; action: T; payload: EventDataOf<T> & PushContext } }[EventType]
  | { type: 'notification'; action: 'inbox.changed'; payload: InboxChanged };
