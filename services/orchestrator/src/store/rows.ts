import type { Sql, Tx } from '@kandev/runtime';
import type { Session, Task, Turn, QueuedMessage, AuditEntry, Workspace } from '@kandev/contracts';

/** Column lists and row → wire mappers, so every query returns the same shapes. */
export const TASK_COLUMNS = [
  'id',
  'workspace_id',
  'parent_id',
  'title',
  'description',
  'status',
  'office',
  'agent',
  'archived_at',
  'cancelled_at',
  'checkout_agent_id',
  'checkout_at',
  'fence_epoch',
  'working_dir',
  'created_at',
  'updated_at',
] as const;
export const SESSION_COLUMNS = [
  'id',
  'task_id',
  'state',
  'error_message',
  'cancel_reason',
  'is_primary',
  'agent',
  'execution_id',
  'instance_id',
  'queue_paused',
  'started_at',
  'completed_at',
  'created_at',
  'updated_at',
] as const;

/**
 * A column list (`TASK_COLUMNS`, `SESSION_COLUMNS`) as identifiers in a tagged template:
 * `SELECT ${columns(q, TASK_COLUMNS)} FROM tasks`. With `alias`, qualified by it (`t.id, t.workspace_id, …`);
 * with `prefix` too, each is also renamed (`s.id AS s_id`), for a join that reads columns of the
 * same name from two tables.
 */
export function columns(q: Sql | Tx, names: readonly string[], alias?: string, prefix?: string) {
  if (alias && prefix) return q(Object.fromEntries(names.map((c) => [`${prefix}${c}`, q(`${alias}.${c}`)])) as never);
  return q(alias ? names.map((c) => `${alias}.${c}`) : [...names]);
}

/** The inverse of `columns` with a prefix: the values of `names` in a joined row, under their own names. */
export function columnsOf<T>(names: readonly string[], row: object, prefix = ''): T {
  const values = row as Record<string, unknown>;
  return Object.fromEntries(names.map((c) => [c, values[`${prefix}${c}`]])) as T;
}

export interface TaskRow extends Task {
  fence_epoch: number;
}
export interface SessionRow extends Session {
  cancel_reason: string | null;
  execution_id: string | null;
  instance_id: string | null;
  queue_paused: boolean;
  created_at: string;
}

export const toTask = (r: TaskRow): Task => ({
  id: r.id,
  workspace_id: r.workspace_id,
  parent_id: r.parent_id,
  title: r.title,
  description: r.description ?? null,
  status: r.status,
  office: r.office,
  agent: r.agent,
  archived_at: r.archived_at,
  cancelled_at: r.cancelled_at,
  checkout_agent_id: r.checkout_agent_id ?? null,
  checkout_at: r.checkout_at ?? null,
  working_dir: r.working_dir ?? null,
  created_at: r.created_at,
  updated_at: r.updated_at,
});

export const toSession = (r: SessionRow): Session => ({
  id: r.id,
  task_id: r.task_id,
  state: r.state,
  error_message: r.error_message,
  is_primary: r.is_primary,
  agent: r.agent,
  started_at: r.started_at,
  completed_at: r.completed_at,
  updated_at: r.updated_at,
});

export type { Turn, QueuedMessage, AuditEntry, Workspace };
