import { actorLabel, notFound, type Actor } from '@kandev/contracts';
import { assertCanAccess } from '../domain/access.js';
import { recordAudit } from '../store/audit.js';
import { deleteQueuedMessage, queueSize } from '../store/queue.js';
import { activeSessionsOfTask, lockSession, resumeQueueOfTask } from '../store/sessions.js';
import { getTask } from '../store/tasks.js';
import { transact, type CallContext, type OrchRuntime } from './context.js';
import { drainQueue, emitQueueChanged } from './message.js';

/**
 * Operator controls of a task's message queue. The queue is the task's: a message
 * queued to a session that has since stopped waits for the task's next session.
 */

/** DELETE /tasks/:id/queue/:message_id: the message leaves the queue unsent; audited (B-3). NOT_FOUND when it is not queued (any more). */
export async function deleteQueued(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string, messageId: string) {
  const task = assertCanAccess(actor, await getTask(rt.sql, taskId));
  return transact(rt, async (tx, emit) => {
    // The row lock of the DELETE serialises with a delivery claiming it: one of them gets it.
    const removed = await deleteQueuedMessage(tx, task.id, messageId);
    if (!removed) throw notFound('queued message not found');
    await recordAudit(tx, {
      task_id: task.id,
      workspace_id: task.workspace_id,
      action: 'queue.delete',
      actor: actorLabel(actor),
      reason: null,
      request_id: call.requestId,
      outcome: 'deleted',
      details: { message_id: removed.id, session_id: removed.session_id, queued_by: removed.queued_by },
    });
    await emitQueueChanged(tx, emit, task, removed.session_id);
    return removed;
  });
}

/**
 * POST /tasks/:id/queue/resume: after an operator's turn cancel the queue waits; this lets
 * it run again. Under the guard of the task's newest active session: when that session is idle, the
 * next message goes now; when a turn runs, it goes at that turn's end. Audited (B-3). Resuming a
 * queue that is not paused is a no-op that still answers (idempotent).
 */
export async function resumeQueue(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string) {
  const task = assertCanAccess(actor, await getTask(rt.sql, taskId));
  const newest = (await activeSessionsOfTask(rt.sql, task.id)).at(-1) ?? null;
  return transact(rt, async (tx, emit) => {
    const s = newest ? await lockSession(tx, newest.id) : null;
    await resumeQueueOfTask(tx, task.id);
    const delivered = s ? await drainQueue(rt, call, tx, emit, task, { ...s, queue_paused: false }) : null;
    await recordAudit(tx, {
      task_id: task.id,
      workspace_id: task.workspace_id,
      action: 'queue.resume',
      actor: actorLabel(actor),
      reason: null,
      request_id: call.requestId,
      outcome: delivered ? 'delivered' : 'resumed',
      details: { session_id: s?.id ?? null, delivered_message_id: delivered },
    });
    return { task_id: task.id, resumed: true as const, delivered_message_id: delivered, size: await queueSize(tx, task.id) };
  });
}
