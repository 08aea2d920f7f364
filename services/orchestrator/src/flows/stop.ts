import { actorLabel, internalError, isKandevError, notFound, type Actor } from '@kandev/contracts';
import { product, type StopSource, type Tx } from '@kandev/runtime';
import { assertCanAccess, assertDirectParent } from '../domain/access.js';
import { decisionStops, planChildStop, planIsEmpty, planTaskStop, type StopPlan, type Teardown } from '../domain/stop.js';
import { mayMoveToReview } from '../domain/transitions.js';
import { recordAudit, type AuditRecord } from '../store/audit.js';
import { lockActiveSessionsOfChild, lockActiveSessionsOfTasks } from '../store/sessions.js';
import { bumpFenceLocked, bumpFenceOfChild, getTask, tasksByIds, type BumpedTask } from '../store/tasks.js';
import type { SessionRow, TaskRow } from '../store/rows.js';
import { afterReply, mark, transact, type CallContext, type Emit, type OrchRuntime } from './context.js';
import { TaskRegistryView } from './registry-view.js';
import { reviewAfterStop } from './review.js';
import { acceptStops, failedDecision, statesAfter } from './stop-decision.js';
import { dispatchTeardowns, type TeardownOutcome } from './teardown-dispatch.js';

/**
 * The one stop pipeline. Planners (domain/stop.ts: child stop, task stop, tree hold) say what to
 * stop; one executor does it the same way for all of them, in three steps:
 * - the decision (flows/stop-decision.ts), inside one transaction: under each session's guard,
 *   recheck it is active (decideStops), close its open turn, write CANCELLED with the plan's fixed
 *   reason;
 * - the REVIEW step (flows/review.ts, R-1.4), in the same transaction, whose failure never undoes
 *   the stops;
 * - the teardown dispatch (flows/teardown-dispatch.ts), after commit: each captured execution is
 *   named to its owner instance for graceful teardown (B-2).
 * This file runs a child stop and a task stop through them; a tree hold (flows/tree.ts)
 * takes the decision inside its own transaction.
 */

/** What a planner read and locked inside the stop's transaction. */
interface PlannedStop {
  plan: StopPlan;
  /** The task, locked (its fence bumped). */
  task: TaskRow;
  /** The task's active sessions, locked: the per-session guard. */
  sessions: SessionRow[];
}

interface StopRun {
  taskId: string;
  actor: Actor;
  /** Who asked, for the stops metric. */
  source: StopSource;
  /** Reads under the locks and plans; runs first in the stop's transaction. */
  planner: (tx: Tx) => Promise<PlannedStop>;
  /** Attempt the REVIEW transition after accepted stops. */
  review: boolean;
  audit: Pick<AuditRecord, 'action'> & { reason?: string | null };
  /** Outcome recorded when nothing was accepted. */
  idleOutcome: string;
  /** Refuse an empty plan with this error, rolling everything back (nothing changes). */
  refuseEmpty?: () => Error;
  /**
   * Answer only once every owner has answered its teardown request (an operator's stop reports
   * which executions it reached, and a request that failed is its INTERNAL_ERROR). Otherwise the
   * answer goes at commit, which is where the stop is decided and durable (R-1.5: it confirms the
   * logical cancellation, not the process exit), and the teardowns and event publication follow it.
   */
  answerAfterTeardown: boolean;
}

/**
 * B-1 and the per-session guard, as the first statements of a stop's transaction: bump the task's
 * launch fence (which takes its row lock), and only once it is done lock its active sessions. The
 * lock's snapshot is taken after the bump holds the task's lock: an admission that committed before
 * is visible (its execution is on the session), one that comes later waits for this transaction and
 * then meets the new epoch (ADR 0001). Tasks are locked before sessions, the order launches,
 * admissions and holds use. Each statement is awaited before the next is issued (ADR 0033).
 */
async function fenceAndLockCandidates(tx: Tx, taskId: string): Promise<BumpedTask & { sessions: SessionRow[] }> {
  const bumped = await bumpFenceLocked(tx, taskId);
  if (!bumped) throw notFound('task not found');
  const sessions = await lockActiveSessionsOfTasks(tx, [taskId]);
  return { ...bumped, sessions };
}

/** What a stop's transaction decided, for what follows its commit. */
interface Decided {
  accepted: number;
  teardowns: Teardown[];
  plan: StopPlan;
}

/** The audit rows of one stop run: its task is known once the planner has read it (they name its workspace). */
class StopAudit {
  task: TaskRow | null = null;
  constructor(
    private readonly run: StopRun,
    private readonly requestId: string,
  ) {}
  record(outcome: string, reason: string | null, details: Record<string, unknown>): AuditRecord {
    return {
      task_id: this.task!.id,
      workspace_id: this.task!.workspace_id,
      action: this.run.audit.action,
      actor: actorLabel(this.run.actor),
      reason: this.run.audit.reason ?? reason,
      request_id: this.requestId,
      outcome,
      details,
    };
  }
}

/**
 * The stop's transaction body, each step awaited before the next (ADR 0033): the planner's reads
 * under the locks (the fence bump, the session locks, the registry); the writes with the audit row
 * (B-3, independent of one another, sent together); REVIEW after the writes, in a savepoint of its
 * own. The outbox rows and COMMIT follow (transact).
 */
async function decide(tx: Tx, emit: Emit, run: StopRun, audit: StopAudit, log: OrchRuntime['log']): Promise<Decided> {
  const planned = await run.planner(tx);
  const { plan, task, sessions } = planned;
  audit.task = task;
  if (run.refuseEmpty && planIsEmpty(plan)) throw run.refuseEmpty();
  const { decision } = await acceptStops(tx, emit, plan, sessions, task.workspace_id, run.actor, (d) =>
    recordAudit(
      tx,
      audit.record(decisionStops(plan, d) ? 'stopped' : run.idleOutcome, plan.reason, {
        sessions: d.cancel,
        executions: d.teardowns.map((t) => ({ session_id: t.execution.session_id, execution_id: t.execution.execution_id, orphaned: t.orphaned })),
      }),
    ),
  );
  if (run.review && decision.cancel.length > 0 && mayMoveToReview(task, statesAfter(sessions, decision))) await reviewAfterStop(tx, emit, task, run.actor, log);
  return { accepted: decision.cancel.length, teardowns: decision.teardowns, plan };
}

/**
 * Run a child or task stop: plan, decision, REVIEW and audit in one plain transaction (`decide`),
 * then the teardowns. A persistence failure cancels nothing (so nothing is torn down and a retry
 * makes progress).
 */
async function runStop(rt: OrchRuntime, call: CallContext, run: StopRun): Promise<{ accepted: number; outcomes: TeardownOutcome[]; plan: StopPlan }> {
  const log = rt.log.child({ task_id: run.taskId, request_id: call.requestId });
  const audit = new StopAudit(run, call.requestId);
  let done;
  try {
    // Counted as a decision in flight until it commits or fails: teardowns yield to it (ADR 0012).
    done = await rt.teardownYield.decision(() => transact(rt, (tx, emit) => decide(tx, emit, run, audit, log), { publish: 'later' }));
  } catch (e) {
    // Nothing was cancelled, so nothing is torn down: a retry makes progress.
    const record = audit.task ? audit.record('error:INTERNAL_ERROR', null, { stage: 'accept' }) : null;
    throw await failedDecision(rt, log, e, record, 'stopping the task failed');
  }
  const { result, publish } = done;
  const { accepted, teardowns, plan } = result;
  product.sessionsStopped(run.source, accepted);
  const dispatch = () => dispatchTeardowns(rt, call, teardowns, plan.reason, log, (details) => audit.record('error:INTERNAL_ERROR', plan.reason, details));
  if (!run.answerAfterTeardown) {
    // Decided and durable: the reply goes first; once it is sent the events follow, and the
    // teardowns once this instance's other stop decisions are taken (bounded, ADR 0012). Failures
    // are logged, audited and retried.
    afterReply(call, () => {
      void publish();
      void rt.teardownYield
        .turn()
        .then(dispatch)
        .catch((err: unknown) => log.error({ err }, 'dispatching teardowns failed; the reconciler retries them'));
    });
    return { accepted, outcomes: [], plan };
  }
  const [outcomes] = await Promise.all([dispatch(), publish()]);
  const failed = outcomes.find((o) => o.error);
  if (failed) {
    const first = failed.error;
    throw isKandevError(first) && first.code === 'INTERNAL_ERROR'
      ? first
      : internalError('stopping the task failed: a teardown request was not accepted', first);
  }
  return { accepted, outcomes, plan };
}

/**
 * R-1: a parent task stops its direct child (halt-only). All checks finish before any side
 * effect; then every live execution among the active sessions is stopped. The answer goes at
 * commit; the teardowns follow it.
 *
 * The checks are the fence bump's and the session locks' SQL (R-1.2): they change and lock nothing
 * unless the caller is the target's direct parent, so a bump that returns the row is the check
 * passed, and only a refusal reads caller and target to say why. A refusal rolls back and is
 * audited on its own.
 */
export async function stopChildTask(rt: OrchRuntime, call: CallContext, callerTaskId: string, targetTaskId: string) {
  const actor: Actor = { type: 'agent', task_id: callerTaskId };
  const registry = new TaskRegistryView(rt.registry, targetTaskId);
  // Set when refuses the caller: the refusal is audited after the rollback.
  let refused: { caller: TaskRow; target: TaskRow } | undefined;
  /** The bump changed nothing: read caller and target to say why (a refusal pays this round trip, a stop does not). */
  const whyNotStoppable = async (tx: Tx): Promise<Error> => {
    const tasks = await tasksByIds(tx, [callerTaskId, targetTaskId]);
    const caller = tasks.get(callerTaskId);
    const target = tasks.get(targetTaskId);
    if (!caller) return notFound('calling task not found');
    if (!target) return notFound('task not found');
    try {
      assertDirectParent(caller, target);
    } catch (e) {
      refused = { caller, target };
      return e as Error;
    }
    return notFound('task not found'); // the parent link changed between the statements
  };
  try {
    const { accepted } = await runStop(rt, call, {
      taskId: targetTaskId,
      actor,
      source: 'parent_agent',
      review: true,
      audit: { action: 'mcp.stop_task' },
      idleOutcome: 'not_running',
      answerAfterTeardown: false,
      planner: async (tx) => {
        // Fence and candidates in the stop's transaction: a launch admitted before the bump has
        // recorded its execution on its session; one admitted after it is refused (B-1, ADR 0001).
        // So each candidate's own execution is all there is to check. Both statements carry
        // in their SQL: a bump that returns the row is the check passed.
        // The bump first, awaited, then the locks (ADR 0001's order, ADR 0033).
        const bumped = await bumpFenceOfChild(tx, targetTaskId, callerTaskId);
        if (!bumped) throw await whyNotStoppable(tx);
        const sessions = await lockActiveSessionsOfChild(tx, targetTaskId, callerTaskId);
        mark('stop.locked');
        const executions = await registry.executionsOf(sessions);
        return { ...bumped, sessions, plan: planChildStop(sessions, executions) };
      },
    });
    return { task_id: targetTaskId, status: accepted > 0 ? ('stopped' as const) : ('not_running' as const) };
  } catch (e) {
    const r = refused as { caller: TaskRow; target: TaskRow } | undefined; // assigned in the planner's closure
    // B-3: refusals are control actions too. Recorded on the target only when it is in the caller's workspace (no cross-workspace trail).
    if (r && r.caller.workspace_id === r.target.workspace_id) {
      await recordAudit(rt.sql, {
        task_id: r.target.id,
        workspace_id: r.target.workspace_id,
        action: 'mcp.stop_task',
        actor: actorLabel(actor),
        reason: null,
        request_id: call.requestId,
        outcome: 'error:FORBIDDEN',
        details: {},
      }).catch((err: unknown) => rt.log.warn({ err, task_id: r.target.id }, 'could not audit a refused stop_task')); // the refusal is the answer either way
    }
    throw e;
  }
}

/**
 * an operator's task stop reaches every live process the task owns: its active sessions
 * (cancelled through the normal transition) and every registered execution, orphans included
 * (halted; their session keeps its terminal state and error message).
 */
export async function stopTask(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string, reason: string | null) {
  // Listed from the bucket beside the access check and the first statements, never inside the
  // transaction through a lifecycle instance: a stalled one held the task's and its sessions'
  // locks for as long as it stalled (the stall fault test: 12 s), and with them every repair.
  const registry = new TaskRegistryView(rt.registry, taskId);
  const task = assertCanAccess(actor, await getTask(rt.sql, taskId));
  const { outcomes } = await runStop(rt, call, {
    taskId: task.id,
    actor,
    source: actor.type === 'agent' ? 'parent_agent' : 'operator',
    review: true,
    audit: { action: 'task.stop', reason },
    idleOutcome: 'not_found',
    // nothing active and nothing registered changes nothing (the fence bump rolls back too).
    refuseEmpty: () => notFound('execution not found'),
    answerAfterTeardown: true,
    planner: async (tx) => {
      const locked = await fenceAndLockCandidates(tx, task.id);
      return { ...locked, plan: planTaskStop(locked.sessions, await registry.everyExecution(locked.sessions)) };
    },
  });
  const executions = outcomes
    .filter((o) => o.reached || !o.teardown.orphaned)
    .map((o) => ({ session_id: o.teardown.execution.session_id, execution_id: o.teardown.execution.execution_id, orphaned: o.teardown.orphaned }));
  return { task_id: task.id, status: 'stopped' as const, executions };
}
