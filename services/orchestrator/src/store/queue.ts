import { randomUUID } from 'node:crypto';
import type { QueuedMessage } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;
const COLUMNS = ['id', 'task_id', 'session_id', 'position', 'prompt', 'sender_task_id', 'queued_by', 'queued_at'];
const cols = (q: Q) => q(COLUMNS);

export async function enqueue(
  tx: Tx,
  m: { task_id: string; session_id: string | null; prompt: string; sender_task_id: string | null; queued_by: string },
): Promise<QueuedMessage> {
  const [row] = await tx<QueuedMessage[]>`
    INSERT INTO queued_messages (id, task_id, session_id, prompt, sender_task_id, queued_by)
    VALUES (${randomUUID()}, ${m.task_id}, ${m.session_id}, ${m.prompt}, ${m.sender_task_id}, ${m.queued_by}) RETURNING ${cols(tx)}`;
  return norm(row!);
}
/** The task's queue length: the queue is the task's, whichever session a message was queued to. */
export async function queueSize(q: Q, taskId: string): Promise<number> {
  const [row] = await q<{ n: number }[]>`SELECT count(*)::int AS n FROM queued_messages WHERE task_id = ${taskId}`;
  return row!.n;
}
export async function queueOfTask(q: Q, taskId: string): Promise<QueuedMessage[]> {
  return (await q<QueuedMessage[]>`SELECT ${cols(q)} FROM queued_messages WHERE task_id = ${taskId} ORDER BY position`).map(norm);
}
/**
 * Claim the oldest queued message of the task for delivery in this transaction: its row is locked
 * (one another transaction is delivering is skipped, never waited on) and deleted, so a rollback
 * (the agent refused the prompt) puts it back and a commit delivers it exactly once, whichever
 * replica or session runs this.
 */
export async function claimNextMessage(tx: Tx, taskId: string): Promise<QueuedMessage | null> {
  const [row] = await tx<QueuedMessage[]>`
    DELETE FROM queued_messages WHERE id = (SELECT id FROM queued_messages WHERE task_id = ${taskId} ORDER BY position LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING ${cols(tx)}`;
  return row ? norm(row) : null;
}
/** An operator removes one queued message (DELETE /tasks/:id/queue/:message_id); null when it is not (or no longer) queued. */
export async function deleteQueuedMessage(tx: Tx, taskId: string, id: string): Promise<QueuedMessage | null> {
  const [row] = await tx<QueuedMessage[]>`DELETE FROM queued_messages WHERE id = ${id} AND task_id = ${taskId} RETURNING ${cols(tx)}`;
  return row ? norm(row) : null;
}
/** Remove one message being dispatched; false when another path already took it. */
export async function takeMessage(tx: Tx, id: string): Promise<boolean> {
  return (await tx`DELETE FROM queued_messages WHERE id = ${id} RETURNING id`).length > 0;
}
const norm = (m: QueuedMessage): QueuedMessage => ({ ...m, position: Number(m.position) });
