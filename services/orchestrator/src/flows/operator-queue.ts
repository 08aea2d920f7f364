import { actorLabel, conflict, isActiveSession, Life, type Actor, type QueuedMessage } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import { assertQueueHasRoom } from '../domain/messages.js';
import { recordAudit } from '../store/audit.js';
import { enqueue, queueSize } from '../store/queue.js';
import { activeSessionsOfTask, lockSession } from '../store/sessions.js';
import { getTask } from '../store/tasks.js';
import { transact, type CallContext, type OrchRuntime } from './context.js';
import { drainQueue, emitQueueChanged } from './message.js';

/** GET /agents: the lifecycle catalogue's names, asked each time (a console lists them once per form). */
export async function listAgents(rt: OrchRuntime, call: CallContext): Promise<{ agents: string[] }> {
  const { agents } = await request(rt.nc, Life.agents, {}, { requestId: call.requestId });
  return { agents: [...agents].sort() };
}

/**
 * POST /tasks/:id/queue: an operator's prompt queued behind the running turn (R-12.1, the console's
 * "Queue" delivery). Stored first under the session's guard, so it is never lost; then, in a second
 * transaction as message_task_kandev does, delivered at once when the session is idle and its queue
 * is not paused by a Cancel turn. A failed delivery leaves it queued.
 */
export async function queueByOperator(
  rt: OrchRuntime,
  call: CallContext,
  actor: Actor,
  taskId: string,
  prompt: string,
): Promise<QueuedMessage & { delivered: boolean }> {
  const task = assertCanAccess(actor, await getTask(rt.sql, taskId));
  // nothing is queued for a cancelled task.
  if (task.status === 'CANCELLED') throw conflict('task is CANCELLED; nothing is queued for it', { status: task.status });
  const newest = (await activeSessionsOfTask(rt.sql, task.id)).at(-1) ?? null;
  if (!newest) throw conflict('task has no live session to queue for; start a session with this prompt instead');
  const stored = await transact(rt, async (tx, emit) => {
    const s = (await lockSession(tx, newest.id))!;
    assertQueueHasRoom(await queueSize(tx, task.id), rt.env.QUEUE_LIMIT);
    const m = await enqueue(tx, { task_id: task.id, session_id: s.id, prompt, sender_task_id: null, queued_by: actorLabel(actor) });
    await Promise.all([
      emitQueueChanged(tx, emit, task, s.id),
      recordAudit(tx, {
        task_id: task.id,
        workspace_id: task.workspace_id,
        action: 'queue.add',
        actor: actorLabel(actor),
        reason: null,
        request_id: call.requestId,
        outcome: 'queued',
        details: { session_id: s.id, message_id: m.id },
      }),
    ]);
    return m;
  });
  let delivered = false;
  try {
    delivered = await transact(rt, async (tx, emit) => {
      const s = await lockSession(tx, newest.id);
      if (!s || !isActiveSession(s.state)) return false;
      // The queue runs in order: this message goes only if it is the next one.
      return (await drainQueue(rt, call, tx, emit, task, s)) === stored.id;
    });
  } catch (e) {
    rt.log.warn({ err: e, message_id: stored.id, task_id: task.id }, 'immediate delivery failed; message stays queued');
  }
  return { ...stored, delivered };
}
