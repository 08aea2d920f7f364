import { randomUUID } from 'node:crypto';
import type { Turn } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;

export async function insertTurn(
  tx: Tx,
  t: { id?: string; session_id: string; execution_id: string | null; prompt: string; sender_task_id: string | null },
): Promise<Turn> {
  const [row] = await tx<Turn[]>`
    INSERT INTO turns (id, session_id, execution_id, prompt, sender_task_id)
    VALUES (${t.id ?? randomUUID()}, ${t.session_id}, ${t.execution_id}, ${t.prompt}, ${t.sender_task_id})
    RETURNING id, session_id, started_at, completed_at, stop_reason`;
  return row!;
}

export async function openTurn(q: Q, sessionId: string): Promise<Turn | null> {
  const [row] = await q<Turn[]>`
    SELECT id, session_id, started_at, completed_at, stop_reason FROM turns
    WHERE session_id = ${sessionId} AND completed_at IS NULL ORDER BY started_at DESC LIMIT 1`;
  return row ?? null;
}

/**
 * Idempotent: a turn completes once; later reports of the same turn change nothing. Returns how long
 * the turn ran in seconds (null when it was already complete).
 */
export async function completeTurn(tx: Tx, id: string, stopReason: string): Promise<number | null> {
  const [row] = await tx<{ seconds: number }[]>`
    UPDATE turns SET completed_at = now(), stop_reason = ${stopReason} WHERE id = ${id} AND completed_at IS NULL
    RETURNING extract(epoch FROM completed_at - started_at)::float8 AS seconds`;
  return row ? row.seconds : null;
}

export async function completeOpenTurns(tx: Tx, sessionId: string, stopReason: string): Promise<void> {
  await tx`UPDATE turns SET completed_at = now(), stop_reason = ${stopReason} WHERE session_id = ${sessionId} AND completed_at IS NULL`;
}

export async function completeOpenTurnsOfSessions(tx: Tx, sessionIds: readonly string[], stopReason: string): Promise<void> {
  if (!sessionIds.length) return;
  await tx`UPDATE turns SET completed_at = now(), stop_reason = ${stopReason} WHERE session_id = ANY(${[...sessionIds]}::uuid[]) AND completed_at IS NULL`;
}
