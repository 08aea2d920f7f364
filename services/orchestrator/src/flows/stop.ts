import {
  actorLabel,
  internalError,
  isKandevError,
  KandevError,
  Life,
  MAX_STOPS_PER_REQUEST,
  notFound,
  type Actor,
  type Execution,
  type ResultOf,
  type SessionState,
} from '@kandev/contracts';
import { isNoResponders, product, request, type Logger, type RegistryReader, type StopSource, type Tx } from '@kandev/runtime';
import { assertCanAccess, assertDirectParent } from '../domain/access.js';
import {
  decideStops,
  decisionStops,
  planChildStop,
  planIsEmpty,
  planTaskStop,
  type StopDecision,
  type StopPlan,
  type StopReason,
  type Teardown,
} from '../domain/stop.js';
import { mayMoveToReview, sessionStateAfterExecutionEnd } from '../domain/transitions.js';
import { recordAudit, type AuditRecord } from '../store/audit.js';
import { detachPendingBundles } from '../store/clarifications.js';
import { cancelSessions, lockActiveSessionsOfChild, lockActiveSessionsOfTasks, setSessionState } from '../store/sessions.js';
import { bumpFenceLocked, bumpFenceOfChild, getTask, tasksByIds, type BumpedTask } from '../store/tasks.js';
import { completeOpenTurnsOfSessions } from '../store/turns.js';
import { toSession, type SessionRow, type TaskRow } from '../store/rows.js';
import { afterReply, mark, transact, type CallContext, type Emit, type OrchRuntime } from './context.js';
import { reviewAfterStop } from './review.js';

/**
 * The one stop pipeline. Planners (domain/stop.ts: child stop, task stop, tree hold) say what to
 * stop; this executor does it the same way for all of them, in two halves:
 * - the decision, inside one transaction: under each session's guard, recheck it is active
 *   (decideStops), close its open turn, write CANCELLED with the plan's fixed reason;
 * - the effect (`dispatchTeardowns`), after commit: each captured execution is named to its owner
 *   instance for graceful teardown (B-2). Teardown itself is asynchronous; a request that fails or
 *   never leaves (a crash right after commit) is made good by the reconciler, which re-stops
 *   CANCELLED sessions whose process lives on.
 */

export interface AcceptedStops {
  /** Sessions this stop moved to CANCELLED, as they are now. */
  cancelled: SessionRow[];
  teardowns: Teardown[];
}

/** A gone execution's session: FAILED, saying so. */
const GONE = { state: sessionStateAfterExecutionEnd('lost', null).state, message: 'agent execution is gone', reason: 'execution_gone' } as const;

interface StopRows {
  cancelled: SessionRow[];
  gone: SessionRow[];
}

/**
 * The writes of a decided stop, on session rows the caller holds locked (the per-session guard).
 * They are independent of one another (each touches its own rows and none reads what another
 * writes), so they go out together, in any order, one round trip for all; whatever must follow
 * them (REVIEW, which reads the sessions) is issued once this resolves.
 */
function stopWrites(tx: Tx, decision: StopDecision, reason: StopReason): Promise<StopRows> {
  return Promise.all([
    completeOpenTurnsOfSessions(tx, decision.cancel, 'cancelled'),
    cancelSessions(tx, decision.cancel, reason),
    // A question an agent of these sessions still waits on has nobody to resume any more.
    detachPendingBundles(tx, decision.cancel, reason),
    completeOpenTurnsOfSessions(tx, decision.gone, 'error'),
    Promise.all(decision.gone.map((id) => setSessionState(tx, id, GONE.state, { error_message: GONE.message, terminal: true }))),
  ]).then(([, cancelled, , , gone]) => ({ cancelled, gone }));
}

/** One session.state_changed per session a stop wrote. */
async function emitStops(
  emit: Emit,
  rows: StopRows,
  before: ReadonlyMap<string, SessionRow>,
  reason: StopReason,
  workspaceId: string,
  actor: Actor,
): Promise<void> {
  for (const after of rows.cancelled) {
    await emit(
      'session.state_changed',
      { workspace_id: workspaceId, task_id: after.task_id, session_id: after.id, actor },
      { session: toSession(after), from: before.get(after.id)!.state, to: 'CANCELLED', reason },
    );
  }
  for (const after of rows.gone) {
    await emit(
      'session.state_changed',
      { workspace_id: workspaceId, task_id: after.task_id, session_id: after.id, actor: null },
      { session: toSession(after), from: before.get(after.id)!.state, to: GONE.state, reason: GONE.reason },
    );
  }
}

/** The decision half of a stop whose caller runs its own transaction (a tree hold): recheck under the locks, write, then stage the events from what was written. */
export async function acceptStops(
  tx: Tx,
  emit: Emit,
  plan: StopPlan,
  locked: readonly SessionRow[],
  workspaceId: string,
  actor: Actor,
): Promise<AcceptedStops> {
  const decision = decideStops(plan, locked);
  const written = await stopWrites(tx, decision, plan.reason);
  await emitStops(emit, written, new Map(locked.map((s) => [s.id, s])), plan.reason, workspaceId, actor);
  return { cancelled: written.cancelled, teardowns: decision.teardowns };
}

/** Session states once the decision is written: what asks about the task's other sessions. */
function statesAfter(sessions: readonly SessionRow[], decision: StopDecision): SessionState[] {
  const cancelled = new Set(decision.cancel);
  const gone = new Set(decision.gone);
  return sessions.map((s) => (cancelled.has(s.id) ? 'CANCELLED' : gone.has(s.id) ? sessionStateAfterExecutionEnd('lost', null).state : s.state));
}

export interface TeardownOutcome {
  teardown: Teardown;
  /** The owner accepted it, or the execution was already gone. */
  reached: boolean;
  error: unknown;
}

/** Ask the owner instance to tear one captured execution down; resolves once accepted (teardown is asynchronous). */
export async function scheduleTeardown(
  rt: OrchRuntime,
  call: CallContext,
  execution: { execution_id: string; instance_id: string },
  reason: string,
  orphaned = false,
) {
  return request(rt.nc, Life.stop.at(execution.instance_id), { execution_id: execution.execution_id, reason, orphaned }, { requestId: call.requestId });
}

type StopResult = ResultOf<typeof Life.stop>;

/**
 * Every teardown sent to its owner at once, settled in the order given: one `exec.stop_many` per
 * owner instance with several (a tree hold's sessions), `exec.stop` for one alone. A hundred
 * requests cost the orchestrator and the lifecycle a validation, a span and a reply each, on the
 * cores the hold's reply waits for. An owner that does not answer `stop_many` (gone, or a version
 * without it) is asked per execution, so each outcome says what it says for a single stop.
 */
async function stopAtOwners(rt: OrchRuntime, call: CallContext, teardowns: readonly Teardown[], reason: string): Promise<PromiseSettledResult<StopResult>[]> {
  const out: PromiseSettledResult<StopResult>[] = new Array(teardowns.length);
  const one = async (i: number): Promise<void> => {
    const t = teardowns[i]!;
    try {
      out[i] = { status: 'fulfilled', value: await scheduleTeardown(rt, call, t.execution, reason, t.orphaned) };
    } catch (e) {
      out[i] = { status: 'rejected', reason: e };
    }
  };
  const byOwner = new Map<string, number[]>();
  teardowns.forEach((t, i) => byOwner.set(t.execution.instance_id, [...(byOwner.get(t.execution.instance_id) ?? []), i]));
  await Promise.all(
    [...byOwner].map(async ([owner, indices]) => {
      if (indices.length === 1) return one(indices[0]!);
      for (let c = 0; c < indices.length; c += MAX_STOPS_PER_REQUEST) {
        const chunk = indices.slice(c, c + MAX_STOPS_PER_REQUEST);
        const stops = chunk.map((i) => ({ execution_id: teardowns[i]!.execution.execution_id, reason, orphaned: teardowns[i]!.orphaned }));
        let results;
        try {
          ({ results } = await request(rt.nc, Life.stopMany.at(owner), { stops }, { requestId: call.requestId }));
        } catch (e) {
          if (isNoResponders(e)) await Promise.all(chunk.map(one));
          else for (const i of chunk) out[i] = { status: 'rejected', reason: e };
          continue;
        }
        chunk.forEach((i, k) => {
          const r = results[k];
          if (!r) out[i] = { status: 'rejected', reason: internalError(`${Life.stopMany.name}: no result for execution ${stops[k]!.execution_id}`) };
          else if ('error' in r) out[i] = { status: 'rejected', reason: KandevError.from(r.error) };
          else out[i] = { status: 'fulfilled', value: r };
        });
      }
    }),
  );
  return out;
}

/**
 * The effect half: every captured execution goes to its owner at once; outcomes are logged with
 * their ids, and those whose request failed are named in one audit row (B-3, `failure`):
 * the decision stands and the reconciler retries them.
 */
export async function dispatchTeardowns(
  rt: OrchRuntime,
  call: CallContext,
  teardowns: readonly Teardown[],
  reason: StopReason,
  log: Logger,
  failure: (details: Record<string, unknown>) => AuditRecord,
): Promise<TeardownOutcome[]> {
  const settled = await stopAtOwners(rt, call, teardowns, reason);
  const outcomes = settled.map((r, i): TeardownOutcome => {
    const teardown = teardowns[i]!;
    const ids = { session_id: teardown.execution.session_id, execution_id: teardown.execution.execution_id, instance_id: teardown.execution.instance_id };
    if (r.status === 'rejected' && isNoResponders(r.reason)) {
      // No instance serves the owner's subject: the owner is not running, and its processes went
      // with it (agents exit with their instance, B-4; a restarted instance reaps what it left,
      // ADR 0005). Its registry entries outlive it by up to the TTL, so a listed execution is no
      // proof of life. Should the owner only be disconnected, it re-admits on reconnect what is
      // still wanted, and this stop has already made the session unwanted; the reconciler re-stops
      // a CANCELLED session whose process shows up live. Not a failure of this stop.
      const how = teardown.execution.listed ? 'listed, its entry not yet expired' : 'unlisted';
      log[teardown.execution.listed ? 'warn' : 'info']({ ...ids, how }, 'the owner instance of the execution is not running; nothing left to tear down');
      return { teardown, reached: false, error: null };
    }
    if (r.status === 'rejected') {
      log.error({ err: r.reason, ...ids, orphaned: teardown.orphaned }, 'teardown request failed; the reconciler retries it');
      return { teardown, reached: false, error: r.reason };
    }
    if (teardown.orphaned) log.warn({ ...ids }, 'orphaned execution reached through the registry; teardown scheduled');
    else log.info({ ...ids }, 'session stopped; teardown scheduled');
    return { teardown, reached: r.value.accepted || r.value.already_gone, error: null };
  });
  const failed = outcomes.filter((o) => o.error);
  if (failed.length) {
    await recordAudit(rt.sql, failure({ stage: 'teardown', failed: failed.map((o) => o.teardown.execution.execution_id) })).catch((err: unknown) =>
      log.warn({ err }, 'audit write failed'),
    );
  }
  return outcomes;
}

/**
 * The error a control action's failed transaction answers with. A refusal (CONFLICT, NOT_FOUND,
 * FORBIDDEN, ...) changed nothing and is answered as it is; anything else rolled back, is logged
 * and recorded (`record`, B-3; null when the task was never read), and answers INTERNAL_ERROR with
 * its cause. Stops and tree holds fail this one way.
 */
export async function failedDecision(rt: OrchRuntime, log: Logger, e: unknown, record: AuditRecord | null, what: string): Promise<Error> {
  if (isKandevError(e) && e.code !== 'INTERNAL_ERROR') return e;
  log.error({ err: e }, `${what}; nothing of it was applied`);
  if (record) await recordAudit(rt.sql, record).catch((err: unknown) => log.warn({ err }, 'audit write failed'));
  else log.warn('it failed before its task was read: no audit row');
  return isKandevError(e) ? e : internalError(what, e);
}

/** What a planner read and locked inside the stop's transaction. */
interface PlannedStop {
  plan: StopPlan;
  /** The task, locked (its fence bumped). */
  task: TaskRow;
  /** The transaction's now(), read by the fence bump: what every write of the stop stamps. */
  at: string;
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

/**
 * Run a child or task stop: plan, decision, REVIEW and audit in one plain transaction, each step
 * awaited before the next (ADR 0033): BEGIN; the fence bump (which reads now()); the session locks;
 * whatever the planner waits for (the registry); the writes with the audit row; REVIEW, which reads
 * the sessions the writes changed; the outbox rows; COMMIT. Then the teardowns. A persistence
 * failure cancels nothing (so nothing is torn down and a retry makes progress).
 */
async function runStop(rt: OrchRuntime, call: CallContext, run: StopRun): Promise<{ accepted: number; outcomes: TeardownOutcome[]; plan: StopPlan }> {
  const { actor } = run;
  const log = rt.log.child({ task_id: run.taskId, request_id: call.requestId });
  // Known once the planner has read it (the audit row names its workspace).
  let task: TaskRow | null = null;
  const audit = (outcome: string, reason: string | null, details: Record<string, unknown>): AuditRecord => ({
    task_id: task!.id,
    workspace_id: task!.workspace_id,
    action: run.audit.action,
    actor: actorLabel(actor),
    reason: run.audit.reason ?? reason,
    request_id: call.requestId,
    outcome,
    details,
  });
  let done;
  try {
    // Counted as a decision in flight until it commits or fails: teardowns yield to it (ADR 0012).
    done = await rt.teardownYield.decision(() =>
      transact(
        rt,
        async (tx, emit) => {
          const planned = await run.planner(tx);
          const { plan } = planned;
          task = planned.task;
          if (run.refuseEmpty && planIsEmpty(plan)) throw run.refuseEmpty();
          const decision = decideStops(plan, planned.sessions);
          const stopped = decisionStops(plan, decision);
          const review = run.review && decision.cancel.length > 0 && mayMoveToReview(planned.task, statesAfter(planned.sessions, decision));
          // The stop's writes and its audit row (B-3, same transaction): independent, one round trip.
          const [written] = await Promise.all([
            stopWrites(tx, decision, plan.reason),
            recordAudit(
              tx,
              audit(stopped ? 'stopped' : run.idleOutcome, plan.reason, {
                sessions: decision.cancel,
                executions: decision.teardowns.map((t) => ({
                  session_id: t.execution.session_id,
                  execution_id: t.execution.execution_id,
                  orphaned: t.orphaned,
                })),
              }),
            ),
          ]);
          await emitStops(emit, written, new Map(planned.sessions.map((x) => [x.id, x])), plan.reason, planned.task.workspace_id, actor);
          // REVIEW after the stop's writes, in a savepoint of its own: its failure never aborts the stop.
          if (review) await reviewAfterStop(tx, emit, planned.task, actor, log);
          return { accepted: decision.cancel.length, teardowns: decision.teardowns, plan };
        },
        { publish: 'later' },
      ),
    );
  } catch (e) {
    // Nothing was cancelled, so nothing is torn down: a retry makes progress.
    throw await failedDecision(rt, log, e, task ? audit('error:INTERNAL_ERROR', null, { stage: 'accept' }) : null, 'stopping the task failed');
  }
  const { result, publish } = done;
  const { accepted, teardowns, plan } = result;
  product.sessionsStopped(run.source, accepted);
  const dispatch = () => dispatchTeardowns(rt, call, teardowns, plan.reason, log, (details) => audit('error:INTERNAL_ERROR', plan.reason, details));
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
 * A stop's view of the registry (ADR 0011): the target task's entries, listed from the bucket
 * itself as the stop arrives, so the listing (two round trips to nats-server) runs alongside the
 * transaction's first statements, holds nothing and asks no lifecycle instance (a stalled one cannot
 * hold a stop's locks). An execution a locked session names that the listing did not see (a launch
 * admitted in between, or an entry gone meanwhile) is read then by its exact key. A failed read is
 * an error, never "gone".
 */
export class TaskRegistryView {
  private readonly listing: Promise<Execution[]>;
  constructor(
    private readonly registry: RegistryReader,
    private readonly taskId: string,
  ) {
    this.listing = registry.listForTask(taskId);
    this.listing.then(() => mark('stop.registry_listed')).catch(() => undefined); // awaited by a read below, or never (a refused caller, nothing active)
  }

  /** The executions the locked sessions name (a child stop): no wait for the listing when they name none. */
  async executionsOf(sessions: ReadonlyArray<{ execution_id: string | null }>): Promise<Execution[]> {
    const ids = sessions.flatMap((s) => (s.execution_id ? [s.execution_id] : []));
    if (!ids.length) return [];
    return this.read(async () => {
      const listed = new Map((await this.listing).map((e) => [e.execution_id, e]));
      const found = await Promise.all(ids.map(async (id) => listed.get(id) ?? this.registry.get(id, this.taskId)));
      return found.filter((e): e is Execution => e !== null);
    });
  }

  /** Every execution of the task (a task stop, R-2.1: orphans included), with those the locked sessions name. */
  async everyExecution(sessions: ReadonlyArray<{ execution_id: string | null }>): Promise<Execution[]> {
    return this.read(async () => {
      const listed = await this.listing;
      const seen = new Set(listed.map((e) => e.execution_id));
      const missed = sessions.flatMap((s) => (s.execution_id && !seen.has(s.execution_id) ? [s.execution_id] : []));
      const found = await Promise.all(missed.map((id) => this.registry.get(id, this.taskId)));
      return [...listed, ...found.filter((e): e is Execution => e !== null)];
    });
  }

  private async read(body: () => Promise<Execution[]>): Promise<Execution[]> {
    try {
      const found = await body();
      mark('stop.registry_read');
      return found;
    } catch (e) {
      throw registryFailure(e);
    }
  }
}

/** A registry read that failed: NATS being unreachable stays UNAVAILABLE (503, retry), anything else is an error, never "nothing running". */
const registryFailure = (e: unknown): Error => (isKandevError(e) && e.code === 'UNAVAILABLE' ? e : internalError('execution registry lookup failed', e));

/** The task's executions as a lifecycle instance sees them (its memory merged with the bucket). A lookup failure is an error, never "nothing running". */
async function registryOf(rt: OrchRuntime, call: CallContext, taskId: string): Promise<Execution[]> {
  try {
    return await request(rt.nc, Life.list, { task_id: taskId }, { requestId: call.requestId });
  } catch (e) {
    throw registryFailure(e);
  }
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

export async function taskExecutions(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string) {
  assertCanAccess(actor, await getTask(rt.sql, taskId));
  const registry = await registryOf(rt, call, taskId);
  return registry.map((e) => ({
    execution_id: e.execution_id,
    session_id: e.session_id,
    status: e.status,
    pid: e.pid,
    protocol: e.protocol,
    instance_id: e.instance_id,
  }));
}
