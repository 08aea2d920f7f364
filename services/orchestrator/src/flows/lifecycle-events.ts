import { isActiveSession, type EventEnvelope } from '@kandev/contracts';
import { processOnce, product, type SessionFailure } from '@kandev/runtime';
import { sessionStateAfterExecutionEnd, sessionStateAfterTurn, turnEndAfterExecutionEnd } from '../domain/transitions.js';
import { recordAudit } from '../store/audit.js';
import { lockSession } from '../store/sessions.js';
import { getTask, lockTask } from '../store/tasks.js';
import { completeOpenTurns, completeTurn, openTurn } from '../store/turns.js';
import type { Tx } from '@kandev/runtime';
import type { Emit } from './context.js';
import type { OrchRuntime } from './context.js';
import { changeSessionState, emitAgentCancelled, reviewTaskIfNothingActive } from './changes.js';
import { drainQueue } from './message.js';
import { AGENT_PERMISSION_EVENT_TYPES, cancelPermissionsOfStoppedExecution, isAgentPermissionEvent, onAgentPermissionEvent } from './permissions.js';

export const LIFECYCLE_CONSUMER = 'orchestrator-lifecycle';
/** What the orchestrator consumes from lifecycle: the end of a turn and the end of an execution. */
export const LIFECYCLE_EVENT_TYPES = ['turn.completed', 'execution.stopped', ...AGENT_PERMISSION_EVENT_TYPES] as const;
type LifecycleEvent = EventEnvelope<'turn.completed'> | EventEnvelope<'execution.stopped'>;
const isLifecycleEvent = (ev: EventEnvelope): ev is LifecycleEvent => ev.type === 'turn.completed' || ev.type === 'execution.stopped';

/**
 * Reacts to what the lifecycle service reports about executions. Each event is applied once
 * (inbox) under the per-session guard, and only if it still concerns the execution the session
 * holds: a late report about a replaced execution changes nothing.
 */
export async function onLifecycleEvent(rt: OrchRuntime, ev: EventEnvelope): Promise<void> {
  if (isAgentPermissionEvent(ev)) return onAgentPermissionEvent(rt, LIFECYCLE_CONSUMER, ev);
  if (!isLifecycleEvent(ev)) return;
  const { session_id: sessionId, task_id: taskId } = ev;
  if (!sessionId || !taskId) return;
  const staged: EventEnvelope[] = [];
  let drained = false;
  // What this event ended, counted once its transaction commits (a retried transaction starts over).
  let counted: { turn?: { agent: string | null; seconds: number }; failed?: { agent: string | null; reason: SessionFailure } } = {};
  await processOnce(rt.sql, LIFECYCLE_CONSUMER, ev.id, async (tx) => {
    counted = {};
    const emit: Emit = async (type, scope, data) => void staged.push(await rt.outbox.add(tx, type, scope, data));
    // An execution's end may move the task (REVIEW), so its task is locked first: task → session is
    // the one lock order (ADR 0060). Taken the other way, a failed launch's repair (task, then its
    // session) and this report of the same execution's end (session, then task) deadlocked.
    // A turn's end touches no task row: the guard and the read go together, one round trip (ADR 0033).
    const [s, task] =
      ev.type === 'execution.stopped'
        ? await lockTask(tx, taskId).then(async (t) => [await lockSession(tx, sessionId), t] as const)
        : await Promise.all([lockSession(tx, sessionId), getTask(tx, taskId)]);
    if (!s || !task) return;
    // Whatever the stopped execution's agent still asked is cancelled, whichever execution the session holds now.
    if (ev.type === 'execution.stopped') await cancelPermissionsOfStoppedExecution(tx, emit, ev);
    if (s.execution_id && s.execution_id !== ev.data.execution_id) return;
    switch (ev.type) {
      case 'turn.completed': {
        const ended = await endTurn(rt, tx, emit, task, s, ev.data.turn_id, ev.data.stop_reason, ev.id);
        drained = ended.drained;
        if (ended.seconds !== null) counted.turn = { agent: s.agent, seconds: ended.seconds };
        // A turn that ends `cancelled` here on a live session was not closed by a cancel or interrupt of
        // ours (those close it in their own transaction): the agent runtime cancelled it while our
        // request failed (its owner died, the database refused the commit). The control action took
        // effect: audit it. On a terminal session it is the stop's teardown cancelling the turn, and
        // the stop has its own row.
        if (ended.closed && ev.data.stop_reason === 'cancelled' && isActiveSession(s.state)) {
          await recordAudit(tx, {
            task_id: task.id,
            workspace_id: task.workspace_id,
            action: 'turn.cancelled',
            actor: `system:lifecycle`,
            reason: 'the agent runtime reported the turn cancelled without a recorded cancel',
            request_id: null,
            outcome: 'cancelled',
            details: { session_id: s.id, turn_id: ev.data.turn_id, execution_id: ev.data.execution_id, event_id: ev.id },
          });
        }
        return;
      }
      case 'execution.stopped': {
        await completeOpenTurns(tx, s.id, turnEndAfterExecutionEnd(isActiveSession(s.state)));
        if (!isActiveSession(s.state)) return; // already CANCELLED by a stop, or an orphan: terminal state and message stay
        const { how, exit_code, reason } = ev.data;
        const end = sessionStateAfterExecutionEnd(how, exit_code, reason);
        await changeSessionState(tx, emit, task, s, end.state, { error_message: end.error, reason: `execution_${how}` });
        if (end.state === 'FAILED') counted.failed = { agent: s.agent, reason: executionFailure(how) };
        await reviewTaskIfNothingActive(tx, emit, task.id, `session_${end.state.toLowerCase()}`);
        return;
      }
    }
  });
  await rt.outbox.flush(staged);
  if (counted.turn) product.turnEnded(counted.turn.agent, counted.turn.seconds);
  if (counted.failed) product.sessionFailed(counted.failed.agent, counted.failed.reason);
  if (drained) rt.log.info({ task_id: taskId, session_id: sessionId }, 'queued message delivered after turn end');
}

/**
 * A turn ended (reported by lifecycle, or found ended by the reconciler): close it, and when no
 * other turn is open move the session on and deliver the next queued message. Returns whether this
 * call closed the turn and whether a queued message was delivered. Idempotent: a turn already
 * closed changes nothing.
 */
export async function endTurn(
  rt: OrchRuntime,
  tx: Tx,
  emit: Emit,
  task: NonNullable<Awaited<ReturnType<typeof getTask>>>,
  s: NonNullable<Awaited<ReturnType<typeof lockSession>>>,
  turnId: string,
  stopReason: string,
  requestId: string,
): Promise<{ closed: boolean; drained: boolean; seconds: number | null }> {
  const seconds = await completeTurn(tx, turnId, stopReason);
  // A turn another path already closed (a cancel, an interrupt or a stop did) changes nothing here.
  if (seconds === null) return { closed: false, drained: false, seconds };
  if (stopReason === 'cancelled' && s.execution_id && isActiveSession(s.state))
    await emitAgentCancelled(emit, { workspace_id: task.workspace_id, task_id: task.id, session_id: s.id }, s.execution_id, turnId);
  if (await openTurn(tx, s.id)) return { closed: true, drained: false, seconds };
  const next = sessionStateAfterTurn(s.state);
  const idle = next ? await changeSessionState(tx, emit, task, s, next, { reason: `turn_${stopReason}` }) : s;
  return { closed: true, drained: (await drainQueue(rt, { requestId }, tx, emit, task, idle)) !== null, seconds };
}

/** The failure label of an execution that ended without a stop (a fixed set: bounded). */
function executionFailure(how: string): SessionFailure {
  return how === 'exited' || how === 'lost' || how === 'killed' ? `execution_${how}` : 'execution_other';
}
