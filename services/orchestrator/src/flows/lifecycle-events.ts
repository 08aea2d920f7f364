import { isActiveSession, type EventEnvelope } from '@kandev/contracts';
import { processOnce } from '@kandev/runtime';
import { sessionStateAfterExecutionEnd, sessionStateAfterTurn, turnEndAfterExecutionEnd } from '../domain/transitions.js';
import { lockSession } from '../store/sessions.js';
import { getTask } from '../store/tasks.js';
import { completeOpenTurns, completeTurn, openTurn } from '../store/turns.js';
import type { Tx } from '@kandev/runtime';
import type { Emit } from './context.js';
import type { OrchRuntime } from './context.js';
import { changeSessionState, reviewTaskIfNothingActive } from './changes.js';
import { drainQueue } from './message.js';

export const LIFECYCLE_CONSUMER = 'orchestrator-lifecycle';

/**
 * Reacts to what the lifecycle service reports about executions. Each event is applied once
 * (inbox) under the per-session guard, and only if it still concerns the execution the session
 * holds: a late report about a replaced execution changes nothing.
 */
export async function onLifecycleEvent(rt: OrchRuntime, ev: EventEnvelope): Promise<void> {
  if (!ev.session_id || !ev.task_id) return;
  const staged: EventEnvelope[] = [];
  let drained = false;
  await processOnce(rt.sql, LIFECYCLE_CONSUMER, ev.id, async (tx) => {
    const emit: Emit = async (type, scope, data) => void staged.push((await rt.outbox.add(tx, type, scope, data)) as EventEnvelope);
    const s = await lockSession(tx, ev.session_id!);
    const task = await getTask(tx, ev.task_id!);
    if (!s || !task) return;
    const data = ev.data as Record<string, unknown>;
    const executionId = data.execution_id as string | undefined;
    if (s.execution_id && executionId && s.execution_id !== executionId) return;
    switch (ev.type) {
      case 'turn.completed':
        drained = await endTurn(rt, tx, emit, task, s, data.turn_id as string, data.stop_reason as string, ev.id);
        return;
      case 'execution.stopped': {
        await completeOpenTurns(tx, s.id, turnEndAfterExecutionEnd(isActiveSession(s.state)));
        if (!isActiveSession(s.state)) return; // already CANCELLED by a stop, or an orphan: terminal state and message stay
        const end = sessionStateAfterExecutionEnd(data.how as 'graceful' | 'killed' | 'exited' | 'lost', (data.exit_code as number | null) ?? null, (data.reason as string | null) ?? null);
        await changeSessionState(tx, emit, task, s, end.state, { error_message: end.error, reason: `execution_${data.how as string}` });
        await reviewTaskIfNothingActive(tx, emit, task.id, `session_${end.state.toLowerCase()}`);
        return;
      }
      default:
        return;
    }
  });
  await rt.outbox.flush(staged);
  if (drained) rt.log.info({ task_id: ev.task_id, session_id: ev.session_id }, 'queued message delivered after turn end');
}

/**
 * A turn ended (reported by lifecycle, or found ended by the reconciler): close it, and when no
 * other turn is open move the session on and deliver the next queued message. Returns whether a
 * queued message was delivered. Idempotent: a turn already closed changes nothing.
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
): Promise<boolean> {
  const first = await completeTurn(tx, turnId, stopReason);
  // A turn another path already closed (a cancel or interrupt did) changes nothing here.
  if (!first) return false;
  if (await openTurn(tx, s.id)) return false;
  const next = sessionStateAfterTurn(s.state);
  const idle = next ? await changeSessionState(tx, emit, task, s, next, { reason: `turn_${stopReason}` }) : s;
  return drainQueue(rt, { requestId }, tx, emit, task, idle);
}
