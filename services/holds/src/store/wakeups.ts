import { randomUUID } from 'node:crypto';
import { HoldSkipReasons, type HoldMode, type Wakeup } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;
const COLUMNS = [
  'id',
  'task_id',
  'workspace_id',
  'reason',
  'payload',
  'status',
  'skip_reason',
  'idempotency_key',
  'session_id',
  'attempts',
  'requested_at',
  'run_at',
  'claimed_at',
  'finished_at',
];
/** The columns as identifiers in a tagged template, qualified by `alias` when given. */
const cols = (q: Q, alias?: string) => q(alias ? COLUMNS.map((c) => `${alias}.${c}`) : COLUMNS);

export interface WakeupRow extends Wakeup {
  workspace_id: string | null;
  attempts: number;
}

/** Insert, or find the wakeup this task already has under the same idempotency key. */
export async function insertWakeup(
  q: Q,
  w: { task_id: string; workspace_id: string; reason: string; payload: unknown; idempotency_key: string | null; run_at: string | null },
): Promise<{ wakeup: WakeupRow; created: boolean }> {
  const payload = w.payload === undefined ? null : q.json(w.payload as never);
  const [row] = await q<WakeupRow[]>`
    INSERT INTO wakeups (id, task_id, workspace_id, reason, payload, status, idempotency_key, run_at)
    VALUES (${randomUUID()}, ${w.task_id}, ${w.workspace_id}, ${w.reason}, ${payload}, 'queued', ${w.idempotency_key}, ${w.run_at})
    ON CONFLICT (task_id, idempotency_key) DO NOTHING RETURNING ${cols(q)}`;
  if (row) return { wakeup: row, created: true };
  const [existing] = await q<WakeupRow[]>`SELECT ${cols(q)} FROM wakeups WHERE task_id = ${w.task_id} AND idempotency_key = ${w.idempotency_key}`;
  return { wakeup: existing!, created: false };
}

export async function getWakeup(q: Q, id: string): Promise<WakeupRow | null> {
  const [row] = await q<WakeupRow[]>`SELECT ${cols(q)} FROM wakeups WHERE id = ${id}`;
  return row ?? null;
}

export async function countActiveWakeups(q: Q, taskIds: readonly string[]): Promise<number> {
  const [row] = await q<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM wakeups WHERE task_id = ANY(${[...taskIds]}::uuid[]) AND status IN ('queued', 'claimed')`;
  return row!.n;
}

/**
 * The dispatcher's claim and the hold gate in ONE statement: queued wakeups are taken
 * with SKIP LOCKED (replicas never take the same one); those whose task is held are finished
 * with the hold's skip reason, the others become claimed. No wakeup is both gated and launched.
 */
export async function claimWakeups(tx: Tx, limit: number, instanceId: string): Promise<Array<WakeupRow & { gate_mode: HoldMode | null }>> {
  return tx<Array<WakeupRow & { gate_mode: HoldMode | null }>>`
    WITH picked AS (
       SELECT w.id, h.mode FROM wakeups w LEFT JOIN held_tasks h ON h.task_id = w.task_id
       WHERE w.status = 'queued' AND COALESCE(w.run_at, w.requested_at) <= now()
       ORDER BY COALESCE(w.run_at, w.requested_at), w.id LIMIT ${limit} FOR UPDATE OF w SKIP LOCKED
     )
     UPDATE wakeups w SET
       status = CASE WHEN p.mode IS NULL THEN 'claimed' ELSE 'finished' END,
       skip_reason = CASE p.mode WHEN 'pause' THEN ${HoldSkipReasons.pause} WHEN 'cancel' THEN ${HoldSkipReasons.cancel} ELSE NULL END,
       claimed_at = now(),
       claimed_by = CASE WHEN p.mode IS NULL THEN ${instanceId} ELSE NULL END,
       finished_at = CASE WHEN p.mode IS NULL THEN NULL ELSE now() END,
       attempts = w.attempts + CASE WHEN p.mode IS NULL THEN 1 ELSE 0 END
     FROM picked p WHERE w.id = p.id
     RETURNING ${cols(tx, 'w')}, p.mode AS gate_mode`;
}

/** Record a launch's outcome, unless a hold cancelled the wakeup meanwhile (its session, if any, is still noted). */
export async function finishWakeup(q: Q, id: string, o: { skip_reason: string | null; session_id: string | null }): Promise<void> {
  await q`UPDATE wakeups SET
            session_id = COALESCE(${o.session_id}::uuid, session_id),
            skip_reason = CASE WHEN status = 'claimed' THEN ${o.skip_reason} ELSE skip_reason END,
            finished_at = CASE WHEN status = 'claimed' THEN now() ELSE finished_at END,
            status = CASE WHEN status = 'claimed' THEN 'finished' ELSE status END
          WHERE id = ${id}`;
}

export async function requeueWakeup(q: Q, id: string): Promise<void> {
  await q`UPDATE wakeups SET status = 'queued', claimed_at = NULL, claimed_by = NULL WHERE id = ${id} AND status = 'claimed'`;
}

/** A live dispatcher's claims of the launches it still runs: their age then measures the dispatcher's silence, not the launch's length. */
export async function renewClaims(q: Q, ids: readonly string[], instanceId: string): Promise<void> {
  if (!ids.length) return;
  await q`UPDATE wakeups SET claimed_at = now() WHERE id = ANY(${[...ids]}::uuid[]) AND status = 'claimed' AND claimed_by = ${instanceId}`;
}

/** Claims whose dispatcher died go back to the queue (the launch is keyed by wakeup id, so no double session). */
export async function requeueStaleClaims(q: Q, olderThanMs: number): Promise<number> {
  const rows = await q`UPDATE wakeups SET status = 'queued', claimed_at = NULL, claimed_by = NULL
                       WHERE status = 'claimed' AND claimed_at < now() - make_interval(secs => ${olderThanMs / 1000}) RETURNING id`;
  return rows.length;
}

/**
 * the queued and claimed wakeups of held tasks, requested up to the hold's creation,
 * are cancelled with the hold's reason. One requested later is the gate's: the claim
 * finishes it with the same reason, so a late application of the hold (its second delivery, or the
 * first after the pause answered) must not cancel it.
 *
 * `requestedUpTo` is a JSON date, whole milliseconds (the database keeps microseconds): the hold was
 * created somewhere in that millisecond, so every wakeup requested in it may be older than the hold
 * and is cancelled. Compared with the truncated value instead, one requested 0.4 ms before the hold
 * was left to the gate.
 */
export async function cancelWakeupsOf(q: Q, taskIds: readonly string[], skipReason: string, requestedUpTo: string): Promise<number> {
  const rows = await q`UPDATE wakeups SET status = 'cancelled', skip_reason = ${skipReason}, finished_at = now()
                       WHERE task_id = ANY(${[...taskIds]}::uuid[]) AND status IN ('queued', 'claimed')
                         AND requested_at < ${requestedUpTo}::timestamptz + interval '1 millisecond' RETURNING id`;
  return rows.length;
}

export const toWakeup = (r: WakeupRow): Wakeup => ({
  id: r.id,
  task_id: r.task_id,
  reason: r.reason,
  payload: r.payload ?? undefined,
  status: r.status,
  skip_reason: r.skip_reason,
  idempotency_key: r.idempotency_key,
  session_id: r.session_id,
  requested_at: r.requested_at,
  run_at: r.run_at ?? null,
  claimed_at: r.claimed_at,
  finished_at: r.finished_at,
});

/** The due, unclaimed wakeups: how many, and how long the oldest has waited (metrics, read at scrape time). */
export async function wakeupBacklog(q: Sql): Promise<{ queued: number; oldestAgeS: number }> {
  const [row] = await q<{ queued: number; oldest: number | null }[]>`
    SELECT count(*)::int AS queued, extract(epoch FROM now() - min(COALESCE(run_at, requested_at)))::float8 AS oldest
      FROM wakeups WHERE status = 'queued' AND COALESCE(run_at, requested_at) <= now()`;
  return { queued: row?.queued ?? 0, oldestAgeS: Math.max(0, row?.oldest ?? 0) };
}
