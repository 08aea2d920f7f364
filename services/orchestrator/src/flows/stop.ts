import { actorLabel, internalError, isActiveSession, isKandevError, Life, notFound, type Actor, type Execution, type SessionState } from '@kandev/contracts';
import { request, type Logger, type Tx } from '@kandev/runtime';
import { assertCanAccess, assertDirectParent } from '../domain/access.js';
import { planChildStop, planIsEmpty, planTaskStop, type CapturedExecution, type StopPlan, type StopReason } from '../domain/stop.js';
import { mayMoveToReview, sessionStateAfterExecutionEnd } from '../domain/transitions.js';
import { recordAudit, type AuditRecord } from '../store/audit.js';
import { detachPendingBundles } from '../store/clarifications.js';
import { cancelSessions, lockActiveSessionsOfTasks } from '../store/sessions.js';
import { bumpFenceLocked, getTask, getTasks } from '../store/tasks.js';
import { completeOpenTurnsOfSessions } from '../store/turns.js';
import { toSession, type SessionRow, type TaskRow } from '../store/rows.js';
import { changeSessionState, changeTaskStatus } from './changes.js';
import { transact, type CallContext, type Emit, type OrchRuntime } from './context.js';

/**
 * The one stop pipeline. Planners (domain/stop.ts: child stop, task stop, tree hold) say what to
 * stop; this executor does it the same way for all of them, in two halves:
 * - the decision (`acceptStops`), inside one transaction: under each session's guard, recheck it
 *   is active, close its open turn, write CANCELLED with the plan's fixed reason;
 * - the effect (`dispatchTeardowns`), after commit: each captured execution is named to its owner
 *   instance for graceful teardown (B-2). Teardown itself is asynchronous; a request that fails is
 *   retried by the reconciler, which re-stops CANCELLED sessions whose process lives on.
 */

export interface Teardown {
  execution: CapturedExecution;
  /** Halted while its session keeps its terminal state. */
  orphaned: boolean;
}

export interface AcceptedStops {
  /** Sessions this stop moved to CANCELLED, as they are now. */
  cancelled: SessionRow[];
  teardowns: Teardown[];
}

/**
 * The decision half of every stop, inside the caller's transaction, on session rows the caller
 * has already locked (the per-session guard). Sessions no longer active, or holding another
 * execution than the one captured, are skipped. The writes are independent and go out together:
 * postgres.js pipelines them on the transaction's connection, one round trip for all.
 */
export async function acceptStops(tx: Tx, emit: Emit, plan: StopPlan, locked: readonly SessionRow[], workspaceId: string, actor: Actor): Promise<AcceptedStops> {
  const rows = new Map(locked.map((s) => [s.id, s]));
  const toCancel = plan.cancel.filter((c) => {
    const s = rows.get(c.session_id);
    // A session a concurrent path ended (or one with another execution now) is not this stop's to cancel.
    return s !== undefined && isActiveSession(s.state) && (!c.execution || !s.execution_id || s.execution_id === c.execution.execution_id);
  });
  const cancelIds = toCancel.map((c) => c.session_id);
  const gone = plan.gone.map((id) => rows.get(id)).filter((s): s is SessionRow => s !== undefined && s.execution_id !== null && isActiveSession(s.state));
  const [, cancelled] = await Promise.all([
    completeOpenTurnsOfSessions(tx, cancelIds, 'cancelled'),
    cancelSessions(tx, cancelIds, plan.reason),
    // A question an agent of these sessions still waits on has nobody to resume any more.
    detachPendingBundles(tx, cancelIds, plan.reason),
    completeOpenTurnsOfSessions(
      tx,
      gone.map((s) => s.id),
      'error',
    ),
    ...gone.map((s) => {
      const end = sessionStateAfterExecutionEnd('lost', null);
      return changeSessionState(tx, emit, { id: s.task_id, workspace_id: workspaceId }, s, end.state, { error_message: 'agent execution is gone', reason: 'execution_gone' });
    }),
  ]);
  for (const after of cancelled) {
    await emit(
      'session.state_changed',
      { workspace_id: workspaceId, task_id: after.task_id, session_id: after.id, actor },
      { session: toSession(after), from: rows.get(after.id)!.state, to: 'CANCELLED', reason: plan.reason },
    );
  }
  const teardowns: Teardown[] = [
    ...toCancel.filter((c) => c.execution).map((c) => ({ execution: c.execution!, orphaned: false })),
    ...plan.halt.map((execution) => ({ execution, orphaned: true })),
  ];
  return { cancelled, teardowns };
}

/**
 * the guarded REVIEW transition after accepted stops, decided from the task row and the
 * session rows this stop holds locked (every working session is active, so they are all there),
 * and written behind a savepoint pipelined with the write: its failure is logged and never undoes
 * the accepted stops.
 */
async function moveToReviewIfIdle(rt: OrchRuntime, tx: Tx, emit: Emit, task: TaskRow, sessionsAfter: readonly SessionState[], actor: Actor): Promise<void> {
  if (!mayMoveToReview(task, sessionsAfter)) return;
  try {
    await Promise.all([tx`SAVEPOINT review`, changeTaskStatus(tx, emit, task, 'REVIEW', { reason: 'stopped', actor }), tx`RELEASE SAVEPOINT review`]);
  } catch (e) {
    rt.log.error({ err: e, task_id: task.id }, 'REVIEW transition after stop failed; stops stand');
    await tx`ROLLBACK TO SAVEPOINT review`;
  }
}

export interface TeardownOutcome {
  teardown: Teardown;
  /** The owner accepted it, or the execution was already gone. */
  reached: boolean;
  error: unknown;
}

/** Ask the owner instance to tear one captured execution down; resolves once accepted (teardown is asynchronous). */
export async function scheduleTeardown(rt: OrchRuntime, call: CallContext, execution: { execution_id: string; instance_id: string }, reason: string, orphaned = false) {
  return request(rt.nc, Life.stop.at(execution.instance_id), { execution_id: execution.execution_id, reason, orphaned }, { requestId: call.requestId });
}

/** The effect half: every captured execution goes to its owner at once; outcomes are logged with their ids. */
export async function dispatchTeardowns(rt: OrchRuntime, call: CallContext, teardowns: readonly Teardown[], reason: StopReason, log: Logger): Promise<TeardownOutcome[]> {
  const settled = await Promise.allSettled(teardowns.map((t) => scheduleTeardown(rt, call, t.execution, reason, t.orphaned)));
  return settled.map((r, i) => {
    const teardown = teardowns[i]!;
    const ids = { session_id: teardown.execution.session_id, execution_id: teardown.execution.execution_id, instance_id: teardown.execution.instance_id };
    if (r.status === 'rejected') {
      log.error({ err: r.reason, ...ids, orphaned: teardown.orphaned }, 'teardown request failed; the reconciler retries it');
      return { teardown, reached: false, error: r.reason };
    }
    if (teardown.orphaned) log.warn({ ...ids }, 'orphaned execution reached through the registry; teardown scheduled');
    else log.info({ ...ids }, 'session stopped; teardown scheduled');
    return { teardown, reached: r.value.accepted || r.value.already_gone, error: null };
  });
}

/** What a planner read and locked inside the stop's transaction. */
interface PlannedStop {
  plan: StopPlan;
  /** The task, locked (its fence bumped). */
  task: TaskRow;
  /** The task's active sessions, locked: the per-session guard. */
  sessions: SessionRow[];
}

interface StopRun {
  task: TaskRow;
  actor: Actor;
  /** Reads under the locks and plans; runs first in the stop's transaction. */
  planner: (tx: Tx) => Promise<PlannedStop>;
  /** Attempt the REVIEW transition after accepted stops. */
  review: boolean;
  audit: Pick<AuditRecord, 'action'> & { reason?: string | null };
  /** Outcome recorded when nothing was accepted. */
  idleOutcome: string;
  /** Refuse an empty plan with this error, rolling everything back (nothing changes). */
  refuseEmpty?: () => Error;
}

/**
 * B-1 and the per-session guard in one round trip, as the first statements of a stop's
 * transaction: bump the task's launch fence (which takes its row lock), then lock its active
 * sessions. Pipelined, the server runs them in order, and the second statement's snapshot is taken
 * after the first holds the lock: an admission that committed before is visible (its execution is
 * on the session), one that comes later waits for this transaction and then meets the new epoch
 * (ADR 0001). Tasks are locked before sessions, the order launches, admissions and holds use.
 */
async function fenceAndLockCandidates(tx: Tx, taskId: string): Promise<{ task: TaskRow; sessions: SessionRow[] }> {
  const [task, sessions] = await Promise.all([bumpFenceLocked(tx, taskId), lockActiveSessionsOfTasks(tx, [taskId])]);
  if (!task) throw notFound('task not found');
  return { task, sessions };
}

/**
 * Run a child or task stop: plan, decision, REVIEW and audit in one transaction; then the
 * teardowns. A persistence failure cancels nothing (so nothing is torn down and a retry makes
 * progress); a teardown request that fails is INTERNAL_ERROR while the accepted stops stand.
 */
async function runStop(rt: OrchRuntime, call: CallContext, run: StopRun): Promise<{ accepted: number; outcomes: TeardownOutcome[]; plan: StopPlan }> {
  const { task, actor } = run;
  const log = rt.log.child({ task_id: task.id, request_id: call.requestId });
  const audit = (outcome: string, reason: string | null, details: Record<string, unknown>): AuditRecord => ({
    task_id: task.id,
    workspace_id: task.workspace_id,
    action: run.audit.action,
    actor: actorLabel(actor),
    reason: run.audit.reason ?? reason,
    request_id: call.requestId,
    outcome,
    details,
  });
  let done: { accepted: AcceptedStops; plan: StopPlan };
  try {
    done = await transact(rt, async (tx, emit) => {
      const planned = await run.planner(tx);
      const { plan } = planned;
      if (run.refuseEmpty && planIsEmpty(plan)) throw run.refuseEmpty();
      const a = await acceptStops(tx, emit, plan, planned.sessions, task.workspace_id, actor);
      const cancelledIds = new Set(a.cancelled.map((x) => x.id));
      const statesAfter = planned.sessions.map((x) => (cancelledIds.has(x.id) ? ('CANCELLED' as const) : x.state));
      const record = recordAudit(
        tx,
        audit(a.cancelled.length > 0 || a.teardowns.length > 0 ? 'stopped' : run.idleOutcome, plan.reason, {
          sessions: a.cancelled.map((x) => x.id),
          executions: a.teardowns.map((t) => ({ session_id: t.execution.session_id, execution_id: t.execution.execution_id, orphaned: t.orphaned })),
        }),
      );
      await Promise.all([record, run.review && a.cancelled.length > 0 ? moveToReviewIfIdle(rt, tx, emit, planned.task, statesAfter, actor) : null]);
      return { accepted: a, plan };
    });
  } catch (e) {
    if (isKandevError(e) && e.code !== 'INTERNAL_ERROR') throw e; // a refusal, not a failure: nothing happened
    // Nothing was cancelled, so nothing is torn down: a retry makes progress.
    log.error({ err: e }, 'persisting the stop failed');
    await recordAudit(rt.sql, audit('error:INTERNAL_ERROR', null, { stage: 'accept' })).catch((err) => log.warn({ err }, 'audit write failed'));
    throw isKandevError(e) ? e : internalError('stopping the task failed', e);
  }
  const { accepted, plan } = done;
  const outcomes = await dispatchTeardowns(rt, call, accepted.teardowns, plan.reason, log);
  const failed = outcomes.filter((o) => o.error);
  if (failed.length) {
    await recordAudit(rt.sql, audit('error:INTERNAL_ERROR', plan.reason, { stage: 'teardown', failed: failed.map((o) => o.teardown.execution.execution_id) })).catch((err) => log.warn({ err }, 'audit write failed'));
    const first = failed[0]!.error;
    throw isKandevError(first) && first.code === 'INTERNAL_ERROR' ? first : internalError('stopping the task failed: a teardown request was not accepted', first);
  }
  return { accepted: accepted.cancelled.length, outcomes, plan };
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

/** The task's executions as the registry (any lifecycle instance) sees them. A lookup failure is an error, never "nothing running". */
async function registryOf(rt: OrchRuntime, call: CallContext, taskId: string): Promise<Execution[]> {
  try {
    return await request(rt.nc, Life.list, { task_id: taskId }, { requestId: call.requestId });
  } catch (e) {
    throw internalError('execution registry lookup failed', e);
  }
}

/**
 * a parent task stops its direct child (halt-only). All checks finish before any side
 * effect; then every live execution among the active sessions is stopped.
 */
export async function stopChildTask(rt: OrchRuntime, call: CallContext, callerTaskId: string, targetTaskId: string) {
  const found = await getTasks(rt.sql, [callerTaskId, targetTaskId]);
  const caller = found.get(callerTaskId);
  const target = found.get(targetTaskId);
  if (!caller) throw notFound('calling task not found');
  if (!target) throw notFound('task not found');
  const actor: Actor = { type: 'agent', task_id: callerTaskId };
  try {
    assertDirectParent(caller, target);
  } catch (e) {
    // B-3: refusals are control actions too. Recorded on the target only when it is in the caller's workspace (no cross-workspace trail).
    if (caller.workspace_id === target.workspace_id) {
      await recordAudit(rt.sql, { task_id: target.id, workspace_id: target.workspace_id, action: 'mcp.stop_task', actor: actorLabel(actor), reason: null, request_id: call.requestId, outcome: 'error:FORBIDDEN', details: {} }).catch(() => undefined);
    }
    throw e;
  }
  // Fence and candidates first, in the stop's transaction: a launch admitted before the bump has
  // recorded its execution on its session; one admitted after it is refused (B-1, ADR 0001). So
  // each candidate's own execution is all there is to check, by exact registry key.
  const { accepted } = await runStop(rt, call, {
    task: target,
    actor,
    review: true,
    audit: { action: 'mcp.stop_task' },
    idleOutcome: 'not_running',
    planner: async (tx) => {
      const { task, sessions } = await fenceAndLockCandidates(tx, target.id);
      return { task, sessions, plan: planChildStop(sessions, sessions.length ? await executionsOf(rt, call, sessions) : []) };
    },
  });
  return { task_id: target.id, status: accepted > 0 ? ('stopped' as const) : ('not_running' as const) };
}

/**
 * an operator's task stop reaches every live process the task owns: its active sessions
 * (cancelled through the normal transition) and every registered execution, orphans included
 * (halted; their session keeps its terminal state and error message).
 */
export async function stopTask(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string, reason: string | null) {
  const task = assertCanAccess(actor, await getTask(rt.sql, taskId));
  const { outcomes } = await runStop(rt, call, {
    task,
    actor,
    review: true,
    audit: { action: 'task.stop', reason },
    idleOutcome: 'not_found',
    // nothing active and nothing registered changes nothing (the fence bump rolls back too).
    refuseEmpty: () => notFound('execution not found'),
    planner: async (tx) => {
      const [{ task: locked, sessions }, registry] = await Promise.all([fenceAndLockCandidates(tx, task.id), registryOf(rt, call, task.id)]);
      return { task: locked, sessions, plan: planTaskStop(sessions, registry) };
    },
  });
  const executions = outcomes
    .filter((o) => o.reached || !o.teardown.orphaned)
    .map((o) => ({ session_id: o.teardown.execution.session_id, execution_id: o.teardown.execution.execution_id, orphaned: o.teardown.orphaned }));
  return { task_id: task.id, status: 'stopped' as const, executions };
}

export async function taskExecutions(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string) {
  assertCanAccess(actor, await getTask(rt.sql, taskId));
  const registry = await registryOf(rt, call, taskId);
  return registry.map((e) => ({ execution_id: e.execution_id, session_id: e.session_id, status: e.status, pid: e.pid, protocol: e.protocol, instance_id: e.instance_id }));
}

