import type { PermissionOption, PermissionRequest, PermissionStatus } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;

/** The row as the wire carries it (contracts PermissionRequest). */
const COLUMNS = [
  'id',
  'workspace_id',
  'task_id',
  'session_id',
  'turn_id',
  'execution_id',
  'permission_id',
  'title',
  'options',
  'status',
  'chosen_option_id',
  'created_at',
  'closed_at',
  'closed_by',
];
const cols = (q: Q) => q(COLUMNS);

export interface NewPermission {
  id: string;
  workspace_id: string;
  task_id: string;
  session_id: string;
  turn_id: string | null;
  execution_id: string;
  permission_id: string;
  title: string;
  options: PermissionOption[];
}

export interface Closure {
  status: Exclude<PermissionStatus, 'pending'>;
  chosen_option_id: string | null;
  closed_by: string;
}

/**
 * Records a request once per (execution, agentctl id), pending or already closed (when its
 * resolution arrived first). Returns the row when this call created it, null when it existed.
 */
export async function insertPermission(tx: Tx, p: NewPermission, closed: Closure | null = null): Promise<PermissionRequest | null> {
  const status = closed?.status ?? 'pending';
  const [row] = await tx<PermissionRequest[]>`
    INSERT INTO permission_requests (id, workspace_id, task_id, session_id, turn_id, execution_id, permission_id, title, options, status, chosen_option_id, closed_at, closed_by)
    VALUES (${p.id}, ${p.workspace_id}, ${p.task_id}, ${p.session_id}, ${p.turn_id}, ${p.execution_id}, ${p.permission_id}, ${p.title},
            ${tx.json(p.options as never)}::jsonb, ${status}, ${closed?.chosen_option_id ?? null}, CASE WHEN ${status}::text = 'pending' THEN NULL ELSE now() END,
            ${closed?.closed_by ?? null})
    ON CONFLICT (execution_id, permission_id) DO NOTHING RETURNING ${cols(tx)}`;
  return row ?? null;
}

export async function getPermission(q: Q, id: string): Promise<PermissionRequest | null> {
  const [row] = await q<PermissionRequest[]>`SELECT ${cols(q)} FROM permission_requests WHERE id = ${id}`;
  return row ?? null;
}

/** The row lock: an operator's answers to one request take turns, and a closing event waits for them. */
export async function lockPermission(tx: Tx, id: string): Promise<PermissionRequest | null> {
  const [row] = await tx<PermissionRequest[]>`SELECT ${cols(tx)} FROM permission_requests WHERE id = ${id} FOR UPDATE`;
  return row ?? null;
}

/** The task's requests: pending first, then newest first. */
export async function permissionsOfTask(q: Q, taskId: string): Promise<PermissionRequest[]> {
  return q<PermissionRequest[]>`
    SELECT ${cols(q)} FROM permission_requests WHERE task_id = ${taskId} ORDER BY (status = 'pending') DESC, created_at DESC, id`;
}

/**
 * The one transition out of `pending`: the row that made it, or null when the request was already
 * closed. Every closer (an operator's answer, agentctl's resolution, a stopped execution) goes
 * through this statement, so exactly one of them closes each request.
 */
export async function closePermission(
  tx: Tx,
  where: { id: string } | { execution_id: string; permission_id: string },
  c: Closure,
): Promise<PermissionRequest | null> {
  const which = 'id' in where ? tx`id = ${where.id}` : tx`execution_id = ${where.execution_id} AND permission_id = ${where.permission_id}`;
  const [row] = await tx<PermissionRequest[]>`
    UPDATE permission_requests SET status = ${c.status}, chosen_option_id = ${c.chosen_option_id}, closed_by = ${c.closed_by}, closed_at = now()
    WHERE ${which} AND status = 'pending' RETURNING ${cols(tx)}`;
  return row ?? null;
}

/** Every still-pending request of an execution that is gone: cancelled (its agent waits on nothing any more). */
export async function cancelPendingOfExecution(tx: Tx, executionId: string, closedBy: string): Promise<PermissionRequest[]> {
  return tx<PermissionRequest[]>`
    UPDATE permission_requests SET status = 'cancelled', closed_by = ${closedBy}, closed_at = now()
    WHERE execution_id = ${executionId} AND status = 'pending' RETURNING ${cols(tx)}`;
}
