import { randomUUID } from 'node:crypto';
import type { QueuedMessage } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;
const COLS = 'id, task_id, session_id, position, prompt, sender_task_id, queued_by, queued_at';

export async function enqueue(tx: Tx, m: { task_id: string; session_id: string; prompt: string; sender_task_id: string | null; queued_by: string }): Promise<QueuedMessage> {
  const [row] = await tx.unsafe<QueuedMessage[]>(
    `INSERT INTO queued_messages (id, task_id, session_id, prompt, sender_task_id, queued_by) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${COLS}`,
    [randomUUID(), m.task_id, m.session_id, m.prompt, m.sender_task_id, m.queued_by],
    { prepare: true },
  );
  return norm(row!);
}
export async function queueSize(q: Q, sessionId: string): Promise<number> {
  const [row] = await q<{ n: number }[]>`SELECT count(*)::int AS n FROM queued_messages WHERE session_id = ${sessionId}`;
  return row!.n;
}
export async function queueOfSession(q: Q, sessionId: string): Promise<QueuedMessage[]> {
  return (await q.unsafe<QueuedMessage[]>(`SELECT ${COLS} FROM queued_messages WHERE session_id = $1 ORDER BY position`, [sessionId], { prepare: true })).map(norm);
}
export async function queueOfTask(q: Q, taskId: string): Promise<QueuedMessage[]> {
  return (await q.unsafe<QueuedMessage[]>(`SELECT ${COLS} FROM queued_messages WHERE task_id = $1 ORDER BY position`, [taskId], { prepare: true })).map(norm);
}
/** Remove one message being dispatched; false when another path already took it. */
export async function takeMessage(tx: Tx, id: string): Promise<boolean> {
  return (await tx`DELETE FROM queued_messages WHERE id = ${id} RETURNING id`).length > 0;
}
const norm = (m: QueuedMessage): QueuedMessage => ({ ...m, position: Number(m.position) });
