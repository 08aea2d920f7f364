import { isKandevError, notFound, type Actor, type HoldMode, type OrchTree, type RequestOf } from '@kandev/contracts';
import { assertCanAccess } from '../domain/access.js';
import { wakeupSkipReason } from '../domain/start.js';
import { getTask, lineageOf } from '../store/tasks.js';
import type { CallContext, OrchRuntime } from './context.js';
import { startSession } from './start-session.js';

const DISPATCHER: Actor = { type: 'system', id: 'wakeup-dispatcher' };

/**
 * An admitted wakeup becomes a session (POST /wakeups). Keyed by the wakeup id, so an
 * at-least-once dispatcher that retries finds the session it started. The start rule decides under
 * the task's row lock (domain/start.ts): a held or CANCELLED task is refused and the dispatcher
 * records the rule's reason as the wakeup's skip reason; a task whose start is
 * already in flight, or that already has a live session, is joined: wakeups of one task coalesce
 * into one session (ADR 0060), and the wakeup finishes with the session it joined.
 */
export async function launchForWakeup(rt: OrchRuntime, call: CallContext, req: RequestOf<typeof OrchTree.wakeupLaunch>) {
  const task = await getTask(rt.sql, req.task_id);
  if (!task) return { launched: false as const, hold_mode: null, reason: 'task not found' };
  const prompt = req.prompt ?? task.description ?? task.title;
  try {
    const started = await startSession(rt, call, { actor: DISPATCHER, task_id: task.id, prompt, launch_key: req.wakeup_id, live_session: 'join' });
    return { launched: true as const, session_id: started.session.id, ...(started.joined ? { joined: true } : {}) };
  } catch (e) {
    if (isKandevError(e) && e.code === 'CONFLICT') {
      const mode = (e.details?.hold_mode as HoldMode | undefined) ?? null;
      const reason = wakeupSkipReason(e.details);
      const skip = reason ? { skip_reason: reason } : {};
      return { launched: false as const, hold_mode: mode, reason: e.message, ...skip };
    }
    throw e;
  }
}

/** A task and its ancestors, root first, for an actor who may see the task. */
export async function taskLineage(rt: OrchRuntime, actor: Actor, taskId: string) {
  const chain = await lineageOf(rt.sql, taskId);
  const self = chain.at(-1);
  if (!self) throw notFound('task not found');
  assertCanAccess(actor, self);
  return chain;
}
