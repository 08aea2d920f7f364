import { z } from 'zod';
import { ExecutionStatus, HoldMode, Protocol, QuestionStatus, SessionState, TaskStatus, WakeupStatus } from './enums.js';

const ts = z.string(); // ISO-8601 timestamps, produced by PostgreSQL or the service clock
const id = z.uuid();

export const Workspace = z.object({ id, name: z.string(), created_at: ts });
export type Workspace = z.infer<typeof Workspace>;

export const Task = z.object({
  id,
  workspace_id: id,
  parent_id: id.nullable(),
  title: z.string(),
  description: z.string().nullable().optional(),
  status: TaskStatus,
  office: z.boolean(),
  agent: z.string().nullable(),
  archived_at: ts.nullable(),
  cancelled_at: ts.nullable(),
  checkout_agent_id: z.string().nullable().optional(),
  checkout_at: ts.nullable().optional(),
  /** Where its agents work: null = `<KANDEV_WORK_DIR>/<workspace_id>/<task_id>`. */
  working_dir: z.string().nullable().optional(),
  created_at: ts,
  updated_at: ts,
});
export type Task = z.infer<typeof Task>;

export const Session = z.object({
  id,
  task_id: id,
  state: SessionState,
  error_message: z.string().nullable(),
  is_primary: z.boolean(),
  agent: z.string().nullable(),
  started_at: ts.nullable(),
  completed_at: ts.nullable(),
  updated_at: ts,
});
export type Session = z.infer<typeof Session>;

export const Turn = z.object({
  id,
  session_id: id.optional(),
  started_at: ts,
  completed_at: ts.nullable(),
  stop_reason: z.string().nullable(),
});
export type Turn = z.infer<typeof Turn>;

/** An entry of the execution registry (NATS KV), independent of the session row. */
export const Execution = z.object({
  execution_id: id,
  session_id: id,
  task_id: id,
  workspace_id: id,
  instance_id: z.string(),
  protocol: Protocol,
  agent: z.string(),
  pid: z.number().int().nullable(),
  agentctl_pid: z.number().int().nullable(),
  agentctl_url: z.string().nullable(),
  status: ExecutionStatus,
  turn_id: id.nullable(),
  /** The launch fence epoch of the task this launch was admitted under (B-1). */
  fence_epoch: z.number().int().nonnegative(),
  started_at: ts,
  updated_at: ts,
});
export type Execution = z.infer<typeof Execution>;

export const ExecutionSummary = Execution.pick({ execution_id: true, status: true, pid: true, protocol: true });

/** The active hold a task is a member of, as a card or a page badges it (a task is in at most one, R-4.8). */
export const TaskHold = z.object({ id, mode: HoldMode });
export type TaskHold = z.infer<typeof TaskHold>;

/** `GET /tasks/:id`: the task, its sessions, and (added to the pinned shape) the active hold it is a member of, or null. */
export const TaskWithSessions = Task.extend({ sessions: z.array(Session), hold: TaskHold.nullable() });
export type TaskWithSessions = z.infer<typeof TaskWithSessions>;

export const SessionDetail = Session.extend({
  execution: ExecutionSummary.nullable(),
  turns: z.array(Turn),
});
export type SessionDetail = z.infer<typeof SessionDetail>;

export const QueuedMessage = z.object({
  id,
  task_id: id,
  /** The session it was queued to; null when the task had none (a paused member, R-10.2): the task's next session delivers it. */
  session_id: id.nullable(),
  position: z.number().int(),
  prompt: z.string(),
  sender_task_id: id.nullable(),
  queued_by: z.string(),
  queued_at: ts,
});
export type QueuedMessage = z.infer<typeof QueuedMessage>;

export const Wakeup = z.object({
  id,
  task_id: id,
  reason: z.string(),
  payload: z.unknown().optional(),
  status: WakeupStatus,
  skip_reason: z.string().nullable(),
  idempotency_key: z.string().nullable().optional(),
  session_id: id.nullable(),
  requested_at: ts,
  run_at: ts.nullable().optional(),
  claimed_at: ts.nullable(),
  finished_at: ts.nullable(),
});
export type Wakeup = z.infer<typeof Wakeup>;

export const HoldMember = z.object({
  task_id: id,
  depth: z.number().int().nonnegative(),
  task_status: TaskStatus,
  skip_reason: z.string().nullable(),
});
export type HoldMember = z.infer<typeof HoldMember>;

export const Hold = z.object({
  id,
  workspace_id: id,
  root_task_id: id,
  mode: HoldMode,
  release_policy: z.unknown().optional(),
  created_by: z.string(),
  reason: z.string().nullable(),
  created_at: ts,
  released_at: ts.nullable(),
  released_by: z.string().nullable(),
  released_reason: z.string().nullable(),
  members: z.array(HoldMember),
});
export type Hold = z.infer<typeof Hold>;

/** B-8: a root task's spending cap. `state` follows the tree's cost: ok below `warn_percent` of the cap, warned from there, exceeded at the cap. */
export const BudgetState = z.enum(['ok', 'warned', 'exceeded']);
export type BudgetState = z.infer<typeof BudgetState>;
export const TreeBudget = z.object({
  /** The root task the budget caps (its whole tree). */
  task_id: id,
  limit_cents: z.number(),
  warn_percent: z.number().int(),
  /** The tree's cost now (R-4.7's cost_cents). */
  spent_cents: z.number(),
  state: BudgetState,
  /** The active pause hold the budget made; null when none (or the tree was already held when the cap was reached). */
  hold_id: id.nullable(),
});
export type TreeBudget = z.infer<typeof TreeBudget>;

export const CostSummary = z.object({
  task_id: id,
  task_count: z.number().int(),
  include_descendants: z.literal(true),
  cost_cents: z.number(),
  tokens_in: z.number(),
  tokens_cached_in: z.number(),
  tokens_out: z.number(),
  /** Cost events whose model has no price: counted in the tokens, at cost 0 (packages/contracts/src/pricing.ts). */
  unpriced_events: z.number().int().optional(),
  /** B-8: the budget of this task's tree when the task is a budgeted root; absent otherwise. */
  budget: TreeBudget.nullable().optional(),
});
export type CostSummary = z.infer<typeof CostSummary>;

export const ClarificationQuestion = z.object({
  id: z.string(),
  text: z.string(),
  options: z.array(z.string()).nullable(),
  status: QuestionStatus,
  answer: z.string().nullable(),
});
export const ClarificationBundle = z.object({
  id,
  task_id: id,
  session_id: id,
  turn_id: id.nullable(),
  status: z.enum(['pending', 'answered', 'rejected', 'cancelled', 'expired']),
  questions: z.array(ClarificationQuestion),
  created_at: ts.optional(),
});
export type ClarificationBundle = z.infer<typeof ClarificationBundle>;

export const AuditEntry = z.object({
  id,
  task_id: id,
  workspace_id: id,
  action: z.string(),
  actor: z.string(),
  reason: z.string().nullable(),
  request_id: z.string().nullable(),
  outcome: z.string(),
  details: z.record(z.string(), z.unknown()),
  created_at: ts,
});
export type AuditEntry = z.infer<typeof AuditEntry>;
