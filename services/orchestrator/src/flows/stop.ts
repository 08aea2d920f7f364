import { actorLabel, internalError, isActiveSession, isKandevError, Life, notFound, type Actor, type Execution } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { assertCanAccess, assertDirectParent } from '../domain/access.js';
import { livenessOf, planTaskStop, StopReasons, taskStopFoundNothing } from '../domain/stop.js';
import { mayMoveToReview, sessionStateAfterExecutionEnd } from '../domain/transitions.js';
import { recordAudit } from '../store/audit.js';
import { detachPendingBundles } from '../store/clarifications.js';
import { activeSessionsOfTask, lockSession, sessionsOfTask } from '../store/sessions.js';
import { bumpFence, getTask, lockTask } from '../store/tasks.js';
import { completeOpenTurns } from '../store/turns.js';
import type { TaskRow } from '../store/rows.js';
import { changeSessionState, changeTaskStatus } from './changes.js';
import { transact, type CallContext, type OrchRuntime } from './context.js';

type StopReason = (typeof StopReasons)[keyof typeof StopReasons];

/** The task's executions as the registry (any lifecycle instance) sees them. A lookup failure is an error, never "nothing running". */
async function registryOf(rt: OrchRuntime, call: CallContext, taskId: string): Promise<Execution[]> {
  try {
    return await request(rt.nc, Life.list, { task_id: taskId }, { requestId: call.requestId });
  } catch (e) {
    throw internalError('execution registry lookup failed', e);
  }
}

/** The registry entries of these sessions' executions, one exact read each. A failed read is an error, never "gone". */
async function executionsOf(rt: OrchRuntime, call: CallContext, sessions: ReadonlyArray<{ task_id: string; execution_id: string | null }>): Promise<Execution[]> {
  try {
    const found = await Promise.all(
      sessions.filter((s) => s.execution_id).map((s) => request(rt.nc, Life.get, { execution_id: s.execution_id!, task_id: s.task_id }, { requestId: call.requestId })),
    );
    return found.filter((e): e is Execution => e !== null);
  } catch (e) {
    throw internalError('execution registry lookup failed', e);
  }
}

/** B-1: every stop bumps the task's launch fence first, so a launch still in flight is refused when it registers. */
async function fenceLaunches(rt: OrchRuntime, taskId: string): Promise<void> {
  // One UPDATE: it takes the task's row lock itself and commits on its own.
  await bumpFence(rt.sql, taskId);
}

/**
 * Accept one session stop under the per-session guard: recheck it is active, write CANCELLED
 * with a fixed reason, close its open turn. Returns the execution it captured (to tear down
 * after the guard is released), or null when the session was no longer active.
 */
export async function acceptSessionStop(
  rt: OrchRuntime,
  task: TaskRow,
  sessionId: string,
  reason: StopReason,
  actor: Actor,
): Promise<{ accepted: boolean; execution_id: string | null; instance_id: string | null }> {
  return transact(rt, async (tx, emit) => {
    const s = await lockSession(tx, sessionId);
    if (!s || !isActiveSession(s.state)) return { accepted: false, execution_id: null, instance_id: null };
    await completeOpenTurns(tx, s.id, 'cancelled');
    await detachPendingBundles(tx, [s.id], reason); // a stopped session's questions have no waiter
    await changeSessionState(tx, emit, task, s, 'CANCELLED', { cancel_reason: reason, reason, actor });
    return { accepted: true, execution_id: s.execution_id, instance_id: s.instance_id };
  });
}

/** Ask the owner instance to tear the captured execution down; returns once accepted (teardown is asynchronous). */
export async function scheduleTeardown(rt: OrchRuntime, call: CallContext, execution: { execution_id: string; instance_id: string }, reason: string, orphaned = false) {
  return request(rt.nc, Life.stop.at(execution.instance_id), { execution_id: execution.execution_id, reason, orphaned }, { requestId: call.requestId });
}

/** the guarded REVIEW transition after accepted stops; its failure never undoes them. */
export async function moveToReviewIfIdle(rt: OrchRuntime, taskId: string, actor: Actor) {
  try {
    await transact(rt, async (tx, emit) => {
      const task = await lockTask(tx, taskId);
      if (!task) return;
      const others = (await sessionsOfTask(tx, taskId)).map((s) => s.state);
      if (mayMoveToReview(task, others)) await changeTaskStatus(tx, emit, task, 'REVIEW', { reason: 'stopped', actor });
    });
  } catch (e) {
    rt.log.error({ err: e, task_id: taskId }, 'REVIEW transition after stop failed; stops stand');
  }
}

/** A session row that says active while its execution is gone is reconciled, not left running forever. */
async function reconcileGoneSession(rt: OrchRuntime, task: TaskRow, sessionId: string) {
  await transact(rt, async (tx, emit) => {
    const s = await lockSession(tx, sessionId);
    if (!s || !isActiveSession(s.state) || !s.execution_id) return;
    const end = sessionStateAfterExecutionEnd('lost', null);
    await completeOpenTurns(tx, s.id, 'error');
    await changeSessionState(tx, emit, task, s, end.state, { error_message: 'agent execution is gone', reason: 'execution_gone' });
  });
}

/**
 * a parent task stops its direct child (halt-only). All checks finish before any side
 * effect; then every live execution among the active sessions is stopped.
 */
export async function stopChildTask(rt: OrchRuntime, call: CallContext, callerTaskId: string, targetTaskId: string) {
  const [caller, target] = await Promise.all([getTask(rt.sql, callerTaskId), getTask(rt.sql, targetTaskId)]);
  if (!caller) throw notFound('calling task not found');
  if (!target) throw notFound('task not found');
  assertDirectParent(caller, target);
  const actor: Actor = { type: 'agent', task_id: callerTaskId };
  const log = rt.log.child({ task_id: target.id, caller_task_id: callerTaskId, request_id: call.requestId });

  // Fence first, then read the candidates: a launch admitted before the bump has recorded its
  // execution on the session by now; one admitted after it is refused (B-1). So each candidate's
  // own execution is all there is to check, by exact registry key (no registry scan on this path).
  await fenceLaunches(rt, target.id);
  const candidates = await activeSessionsOfTask(rt.sql, target.id);
  let accepted = 0;
  let failure: unknown = null;
  const teardowns: Array<{ session_id: string; execution: Execution }> = [];
  if (candidates.length > 0) {
    const registry = await executionsOf(rt, call, candidates);
    for (const candidate of candidates) {
      const live = livenessOf(candidate, registry);
      if (live.kind === 'gone') {
        await reconcileGoneSession(rt, target, candidate.id).catch((e) => log.warn({ err: e, session_id: candidate.id }, 'reconcile failed'));
        continue;
      }
      if (live.kind === 'inactive') continue;
      let captured: Awaited<ReturnType<typeof acceptSessionStop>>;
      try {
        captured = await acceptSessionStop(rt, target, candidate.id, StopReasons.parentStop, actor);
      } catch (e) {
        // Not cancelled, so not torn down: a retry picks it up.
        log.error({ err: e, session_id: candidate.id }, 'persisting the stop failed');
        failure ??= e;
        continue;
      }
      if (!captured.accepted) continue;
      accepted++;
      if (live.kind === 'live') teardowns.push({ session_id: candidate.id, execution: live.execution });
    }
  }
  // Teardown requests and the REVIEW transition go out together: neither waits for the other,
  // and both only follow accepted (persisted) stops.
  const [torn] = await Promise.all([
    Promise.allSettled(teardowns.map((t) => scheduleTeardown(rt, call, t.execution, StopReasons.parentStop))),
    accepted > 0 ? moveToReviewIfIdle(rt, target.id, actor) : Promise.resolve(),
  ]);
  torn.forEach((r, i) => {
    const t = teardowns[i]!;
    if (r.status === 'fulfilled') log.info({ session_id: t.session_id, execution_id: t.execution.execution_id }, 'child session stopped; teardown scheduled');
    else {
      log.error({ err: r.reason, session_id: t.session_id, execution_id: t.execution.execution_id }, 'teardown request failed; reconciler will retry');
      failure ??= r.reason;
    }
  });
  const outcome = failure ? 'error:INTERNAL_ERROR' : accepted > 0 ? 'stopped' : 'not_running';
  if (accepted > 0 || failure) {
    await recordAudit(rt.sql, { task_id: target.id, workspace_id: target.workspace_id, action: 'mcp.stop_task', actor: actorLabel(actor), reason: StopReasons.parentStop, request_id: call.requestId, outcome, details: { accepted } }).catch((e) =>
      log.warn({ err: e }, 'audit write failed'),
    );
  }
  if (failure) throw isKandevError(failure) && failure.code === 'INTERNAL_ERROR' ? failure : internalError('stopping the task failed', failure);
  return { task_id: target.id, status: accepted > 0 ? ('stopped' as const) : ('not_running' as const) };
}

/**
 * an operator's task stop reaches every live process the task owns: its active sessions
 * (cancelled through the normal transition) and every registered execution, orphans included
 * (halted; their session keeps its terminal state and error message).
 */
export async function stopTask(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string, reason: string | null) {
  const task = assertCanAccess(actor, await getTask(rt.sql, taskId));
  const log = rt.log.child({ task_id: task.id, request_id: call.requestId });
  await fenceLaunches(rt, task.id);
  const [active, registry] = await Promise.all([activeSessionsOfTask(rt.sql, task.id), registryOf(rt, call, task.id)]);
  const plan = planTaskStop(active, registry);
  if (taskStopFoundNothing(plan)) throw notFound('execution not found');

  const executions: Array<{ session_id: string; execution_id: string; orphaned: boolean }> = [];
  let accepted = 0;
  let failure: unknown = null;
  for (const c of plan.cancel) {
    try {
      const captured = await acceptSessionStop(rt, task, c.session_id, StopReasons.operatorStop, actor);
      if (captured.accepted) accepted++;
    } catch (e) {
      log.error({ err: e, session_id: c.session_id }, 'persisting the stop failed');
      failure ??= e;
      continue;
    }
    if (!c.execution) continue;
    try {
      await scheduleTeardown(rt, call, c.execution, StopReasons.operatorStop);
      executions.push({ session_id: c.session_id, execution_id: c.execution.execution_id, orphaned: false });
    } catch (e) {
      log.error({ err: e, session_id: c.session_id, execution_id: c.execution.execution_id }, 'teardown request failed');
      failure ??= e;
    }
  }
  for (const o of plan.orphans) {
    // orphans are reached through the registry, not the active-session query; say so.
    log.warn({ session_id: o.session_id, execution_id: o.execution_id, instance_id: o.instance_id, status: o.status }, 'stopping orphaned execution reached through the registry');
    try {
      const res = await scheduleTeardown(rt, call, o, StopReasons.operatorStop, true);
      if (res.accepted || res.already_gone) executions.push({ session_id: o.session_id, execution_id: o.execution_id, orphaned: true });
    } catch (e) {
      log.error({ err: e, session_id: o.session_id, execution_id: o.execution_id }, 'orphan teardown request failed');
      failure ??= e;
    }
  }
  if (accepted > 0) await moveToReviewIfIdle(rt, task.id, actor);
  await recordAudit(rt.sql, {
    task_id: task.id,
    workspace_id: task.workspace_id,
    action: 'task.stop',
    actor: actorLabel(actor),
    reason: reason ?? StopReasons.operatorStop,
    request_id: call.requestId,
    outcome: failure ? 'error:INTERNAL_ERROR' : 'stopped',
    details: { executions, cancelled_sessions: accepted },
  }).catch((e) => log.warn({ err: e }, 'audit write failed'));
  if (failure) throw internalError('stopping the task failed', failure);
  return { task_id: task.id, status: 'stopped' as const, executions };
}

export async function taskExecutions(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string) {
  assertCanAccess(actor, await getTask(rt.sql, taskId));
  const registry = await registryOf(rt, call, taskId);
  return registry.map((e) => ({ execution_id: e.execution_id, session_id: e.session_id, status: e.status, pid: e.pid, protocol: e.protocol, instance_id: e.instance_id }));
}
