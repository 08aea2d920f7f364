import type { Sql, Tx } from '@kandev/runtime';
import { DetachReasons, type BundleFacts, type BundleStatus, type Question } from '../domain/clarifications.js';

type Q = Sql | Tx;

export interface BundleRow extends BundleFacts {
  expires_in_ms: number;
}

/**
 * A bundle with the facts its rules need, judged by the database clock so every replica agrees:
 * lease validity, whether its turn is still open, whether the session has a newer turn.
 */
const bundleSelect = (q: Q) => q`
  SELECT b.id, b.task_id, b.workspace_id, b.session_id, b.turn_id, b.status, b.reason, b.created_at, b.expires_at, b.closed_at,
    b.detached_at, b.detached_reason,
    b.waiter_lease_until > now() AS lease_valid,
    COALESCE((SELECT tu.completed_at IS NULL FROM turns tu WHERE tu.id = b.turn_id), false) AS turn_open,
    b.turn_id IS DISTINCT FROM (SELECT tu.id FROM turns tu WHERE tu.session_id = b.session_id ORDER BY tu.started_at DESC, tu.id DESC LIMIT 1) AS superseded,
    GREATEST(0, floor(extract(epoch FROM (b.expires_at - now())) * 1000))::int AS expires_in_ms,
    COALESCE((SELECT json_agg(json_build_object('id', q.id, 'text', q.text, 'options', q.options, 'status', q.status, 'answer', q.answer) ORDER BY q.position)
              FROM clarification_questions q WHERE q.bundle_id = b.id), '[]'::json) AS questions
  FROM clarification_bundles b`;

export async function insertBundle(
  tx: Tx,
  b: { id: string; task_id: string; workspace_id: string; session_id: string; turn_id: string; wait_ms: number; lease_ms: number; questions: Question[] },
): Promise<void> {
  await tx`
    INSERT INTO clarification_bundles (id, task_id, workspace_id, session_id, turn_id, expires_at, waiter_lease_until)
    VALUES (${b.id}, ${b.task_id}, ${b.workspace_id}, ${b.session_id}, ${b.turn_id},
            now() + make_interval(secs => ${b.wait_ms / 1000}), now() + make_interval(secs => ${b.lease_ms / 1000}))`;
  for (const [position, q] of b.questions.entries()) {
    await tx`INSERT INTO clarification_questions (bundle_id, position, id, text, options)
             VALUES (${b.id}, ${position}, ${q.id}, ${q.text}, ${q.options === null ? null : tx.json(q.options)})`;
  }
}

export async function getBundle(q: Q, id: string): Promise<BundleRow | null> {
  const [row] = await q<BundleRow[]>`${bundleSelect(q)} WHERE b.id = ${id}`;
  return row ?? null;
}

/** The bundle's row lock: responses, cancels, renewals and expiry of one bundle are serialised across replicas. */
export async function lockBundle(tx: Tx, id: string): Promise<BundleRow | null> {
  const [row] = await tx<BundleRow[]>`${bundleSelect(tx)} WHERE b.id = ${id} FOR UPDATE OF b`;
  return row ?? null;
}

/** Every bundle of a task, newest first. */
export async function bundlesOfTask(q: Q, taskId: string): Promise<BundleRow[]> {
  return q<BundleRow[]>`${bundleSelect(q)} WHERE b.task_id = ${taskId} ORDER BY b.created_at DESC, b.id`;
}

/** Writes the questions a response or cancel changed. */
export async function updateQuestions(tx: Tx, bundleId: string, before: readonly Question[], after: readonly Question[]): Promise<void> {
  for (const [i, q] of after.entries()) {
    const prev = before[i];
    if (prev && prev.status === q.status && prev.answer === q.answer) continue;
    await tx`UPDATE clarification_questions SET status = ${q.status}, answer = ${q.answer},
               answered_at = CASE WHEN ${q.status} = 'answered' THEN now() ELSE answered_at END
             WHERE bundle_id = ${bundleId} AND id = ${q.id}`;
  }
}

export async function closeBundle(
  tx: Tx,
  id: string,
  c: { status: BundleStatus; reason: string | null; closed_by: string; detach: string | null },
): Promise<void> {
  await tx`UPDATE clarification_bundles SET status = ${c.status}, reason = COALESCE(${c.reason}, reason), closed_at = now(), closed_by = ${c.closed_by},
             detached_at = CASE WHEN ${c.detach}::text IS NOT NULL THEN COALESCE(detached_at, now()) ELSE detached_at END,
             detached_reason = COALESCE(detached_reason, ${c.detach})
           WHERE id = ${id}`;
}

export async function extendLease(tx: Tx, id: string, leaseMs: number): Promise<void> {
  await tx`UPDATE clarification_bundles SET waiter_lease_until = now() + make_interval(secs => ${leaseMs / 1000}) WHERE id = ${id}`;
}

export async function markDetached(tx: Tx, id: string, reason: string): Promise<void> {
  await tx`UPDATE clarification_bundles SET detached_at = now(), detached_reason = ${reason} WHERE id = ${id} AND detached_at IS NULL`;
}

/**
 * The waiters of these sessions' pending bundles are gone for good (a turn cancel, a session
 * stop): record it, so no replica treats them as live and no late outcome is delivered (R-5.3).
 * Call inside the transaction that cancels the turn or stops the session. A bundle its waiting call
 * already released (`caller_gone`: the agent dropped the call as its turn was cancelled, before this
 * transaction committed) takes this reason, which says why.
 */
export async function detachPendingBundles(tx: Tx, sessionIds: readonly string[], reason: string): Promise<number> {
  if (sessionIds.length === 0) return 0;
  const rows = await tx`UPDATE clarification_bundles SET detached_at = now(), detached_reason = ${reason}
                        WHERE session_id = ANY(${sessionIds as string[]}::uuid[]) AND status = 'pending'
                          AND (detached_at IS NULL OR detached_reason = ${DetachReasons.callerGone}) RETURNING id`;
  return rows.length;
}
