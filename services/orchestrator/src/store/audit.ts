import { randomUUID } from 'node:crypto';
import type { AuditEntry } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;

export interface AuditRecord {
  task_id: string;
  workspace_id: string;
  action: string;
  actor: string;
  reason: string | null;
  request_id: string | null;
  outcome: string;
  details?: Record<string, unknown>;
}

/** B-3: every control action, with actor, reason, request id and outcome. Returns the row's id. */
export async function recordAudit(q: Q, a: AuditRecord): Promise<string> {
  const id = randomUUID();
  await q`INSERT INTO audit_log (id, task_id, workspace_id, action, actor, reason, request_id, outcome, details)
          VALUES (${id}, ${a.task_id}, ${a.workspace_id}, ${a.action}, ${a.actor}, ${a.reason}, ${a.request_id}, ${a.outcome}, ${q.json((a.details ?? {}) as never)})`;
  return id;
}

/**
 * The outcome of an action that is carried out in two transactions (a message interrupt: stored,
 * then delivered): the first records the row, the second settles its outcome in its own
 * transaction, so the row says what committed and nothing else.
 */
export async function settleAudit(tx: Tx, id: string, outcome: string, details: Record<string, unknown> = {}): Promise<void> {
  await tx`UPDATE audit_log SET outcome = ${outcome}, details = details || ${tx.json(details as never)} WHERE id = ${id}`;
}

/** Many audit rows in one statement (a tree hold records its action on every member). */
export async function recordAudits(q: Q, rows: readonly AuditRecord[]): Promise<void> {
  if (!rows.length) return;
  const data = rows.map((a) => ({ ...a, id: randomUUID(), details: a.details ?? {} }));
  await q`INSERT INTO audit_log (id, task_id, workspace_id, action, actor, reason, request_id, outcome, details)
          SELECT r.id, r.task_id, r.workspace_id, r.action, r.actor, r.reason, r.request_id, r.outcome, r.details
          FROM jsonb_to_recordset(${q.json(data as never)}) AS r(id uuid, task_id uuid, workspace_id uuid, action text, actor text, reason text, request_id text, outcome text, details jsonb)`;
}

export async function auditOfTask(q: Q, taskId: string): Promise<AuditEntry[]> {
  return q<AuditEntry[]>`SELECT id, task_id, workspace_id, action, actor, reason, request_id, outcome, details, created_at
                         FROM audit_log WHERE task_id = ${taskId} ORDER BY created_at DESC, id`;
}
