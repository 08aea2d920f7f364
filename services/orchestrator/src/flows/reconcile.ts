import { ACTIVE_SESSION_STATES, isLiveExecution, type Execution } from '@kandev/contracts';
import { product, repeatEvery, type Sql, type Tx } from '@kandev/runtime';
import { recordAudit } from '../store/audit.js';
import { sessionStateAfterExecutionEnd, statusOfStalledTask } from '../domain/transitions.js';
import { recordedStopReason, StopReasons } from '../domain/stop.js';
import { activeSessionsOfTask, lockSessionIfFree } from '../store/sessions.js';
import { activeHoldOfTask } from '../store/holds.js';
import { purgeKeys } from '../store/idempotency.js';
import { getTask, lockTask, lockTaskIfFree } from '../store/tasks.js';
import { completeOpenTurns, openTurn } from '../store/turns.js';
import { changeSessionState, changeTaskStatus, reviewTaskIfNothingActive } from './changes.js';
import { endTurn } from './lifecycle-events.js';
import { transact, type OrchRuntime } from './context.js';
import { scheduleTeardown } from './teardown-dispatch.js';

/** B-3: what the reconciler does to a task is audited like any other control action, in its own transaction. */
const reconcilerAudit = (q: Sql | Tx, task: { id: string; workspace_id: string }, action: string, details: Record<string, unknown>) =>
  recordAudit(q, {
    task_id: task.id,
    workspace_id: task.workspace_id,
    action,
    actor: 'system:reconciler',
    reason: null,
    request_id: null,
    outcome: 'reconciled',
    details,
  });

interface Suspect {
  id: string;
  task_id: string;
  state: string;
  execution_id: string;
  cancel_reason: string | null;
}

/**
 * Keeps the database and the registry from disagreeing for long (R-6.3, R-6.4, B-4):
 * - an active session whose execution left the registry (its lifecycle instance died and the entry
 *   expired) is marked FAILED instead of looking RUNNING forever;
 * - a CANCELLED session whose execution is still registered and not being torn down gets its stop
 *   sent again (a lost teardown request must not leave a living process behind a logical cancel);
 * - a RUNNING session whose execution lifecycle reports idle (no turn in flight) for longer than
 *   TURN_OUTCOME_GRACE_MS, while the orchestrator still has a turn open that began before that,
 *   gets the turn closed (stop_reason `lost`) and moves on as on turn.completed: the report of
 *   the turn's end never arrived;
 * - a start whose orchestrator died mid-launch: a STARTING session that never got an execution
 *   within LAUNCH_LOST_AFTER_MS is FAILED (`launch_lost`; a launch still under way is refused by
 *   admission, which wants an active session), and one whose execution was admitted and is idle
 *   without a turn (a start without a prompt) becomes WAITING_FOR_INPUT, as the start would have
 *   made it.
 * One replica at a time (advisory lock); every step is idempotent.
 */
export async function reconcileOnce(
  rt: OrchRuntime,
): Promise<{ lost: number; restopped: number; turnsClosed: number; repaired: number; startsSettled: number; launchesLost: number }> {
  // A session-level advisory lock lives on one connection: reserve it, so lock and unlock meet.
  const conn = await rt.sql.reserve();
  const [row] = await conn<{ locked: boolean }[]>`SELECT pg_try_advisory_lock(hashtext('kandev-orchestrator-reconcile')) AS locked`;
  if (!row?.locked) {
    conn.release();
    return { lost: 0, restopped: 0, turnsClosed: 0, repaired: 0, startsSettled: 0, launchesLost: 0 };
  }
  try {
    // Settled rows only: a launch being admitted or a stop in progress is not a disagreement yet.
    const suspects = await rt.sql<Suspect[]>`
      SELECT id, task_id, state, execution_id, cancel_reason FROM sessions
      WHERE execution_id IS NOT NULL AND updated_at < now() - interval '5 seconds'
        AND (state = ANY(${[...ACTIVE_SESSION_STATES]})
             OR (state = 'CANCELLED' AND updated_at > now() - interval '1 hour'))
      ORDER BY updated_at LIMIT 500`;
    let lost = 0;
    let restopped = 0;
    const restoppedIds = new Set<string>();
    let turnsClosed = 0;
    let startsSettled = 0;
    for (const s of suspects) {
      let execution: Execution | null;
      try {
        // From the bucket itself (ADR 0011): the reconciler must not depend on the lifecycle
        // instances whose failures it makes good; a dead or restarting one answers nothing.
        execution = await rt.registry.get(s.execution_id, s.task_id);
      } catch (e) {
        rt.log.warn({ err: e }, 'registry unreachable; reconciliation postponed');
        break;
      }
      const live = execution !== null && isLiveExecution(execution.status);
      if (s.state !== 'CANCELLED' && !live) {
        if (await markLost(rt, s)) lost++;
      } else if (s.state === 'CANCELLED' && live && execution!.status !== 'STOPPING') {
        rt.log.warn(
          { task_id: s.task_id, session_id: s.id, execution_id: s.execution_id, status: execution!.status },
          'cancelled session still has a live execution; stopping it again',
        );
        // The stop that cancelled it, sent again: its own reason (a parent's, an operator's, a hold's).
        const reason = recordedStopReason(s.cancel_reason);
        restoppedIds.add(execution!.execution_id);
        await scheduleTeardown(rt, { requestId: `reconcile-${s.id}` }, execution!, reason).catch((e) => rt.log.warn({ err: e }, 'restop failed'));
        await reconcilerAudit(rt.sql, { id: s.task_id, workspace_id: execution!.workspace_id }, 'reconcile.restop', {
          session_id: s.id,
          execution_id: s.execution_id,
          reason,
        }).catch((e) => rt.log.warn({ err: e }, 'audit write failed'));
        restopped++;
      } else if (s.state === 'STARTING' && live && execution!.status === 'READY' && execution!.turn_id === null) {
        if (Date.now() - Date.parse(execution!.updated_at) >= rt.env.TURN_OUTCOME_GRACE_MS && (await settleAdmittedStart(rt, s))) startsSettled++;
      } else if (s.state === 'RUNNING' && live && execution!.status === 'READY' && execution!.turn_id === null) {
        if (Date.now() - Date.parse(execution!.updated_at) >= rt.env.TURN_OUTCOME_GRACE_MS && (await closeLostTurn(rt, s, execution!))) turnsClosed++;
      }
    }
    restopped += await restopHeldMembers(rt, restoppedIds);
    const launchesLost = await failLostLaunches(rt);
    const repaired = await repairStalledTasks(rt);
    const purged = await purgeKeys(rt.sql, rt.env.IDEMPOTENCY_KEEP_MS);
    if (purged) rt.log.debug({ purged }, 'idempotency keys past their retention purged');
    return { lost, restopped, turnsClosed, repaired, startsSettled, launchesLost };
  } finally {
    // A failed unlock means the connection is broken: the server drops its session locks with it.
    await conn`SELECT pg_advisory_unlock(hashtext('kandev-orchestrator-reconcile'))`.catch((e: unknown) =>
      rt.log.warn({ err: e }, 'reconcile lock release failed'),
    );
    conn.release();
  }
}

/**
 * STARTING sessions with no execution for longer than any launch can take (LAUNCH_LOST_AFTER_MS, not
 * the stalled-task bound: a burst of starts can wait in lifecycle's queue longer than a short one): the start that made them
 * died (its orchestrator with it) before its launch reached a lifecycle instance, or the launch
 * was lost. Such a session counts as active, so without this the task would look busy forever and
 * the stalled-task repair would never see it. Held tasks keep their status.
 */
async function failLostLaunches(rt: OrchRuntime): Promise<number> {
  const bound = rt.env.LAUNCH_LOST_AFTER_MS;
  const stale = await rt.sql<{ id: string; task_id: string }[]>`
    SELECT id, task_id FROM sessions
    WHERE state = 'STARTING' AND execution_id IS NULL AND updated_at < now() - make_interval(secs => ${bound / 1000})
    ORDER BY updated_at LIMIT 500`;
  let failed = 0;
  for (const { id, task_id } of stale) {
    const done = await transact(rt, async (tx, emit) => {
      // Task before session, the one lock order (ADR 0060); either busy: next pass.
      const task = await lockTaskIfFree(tx, task_id);
      const s = task ? await lockSessionIfFree(tx, id) : null;
      // Re-check under the guard: an admission may have attached an execution since the listing.
      if (!task || !s || s.state !== 'STARTING' || s.execution_id !== null) return null;
      await completeOpenTurns(tx, s.id, 'error');
      await changeSessionState(tx, emit, task, s, 'FAILED', { error_message: 'the launch was lost before an agent started', reason: 'launch_lost' });
      if (!(await activeHoldOfTask(tx, task.id))) await reviewTaskIfNothingActive(tx, emit, task.id, 'launch_lost');
      await reconcilerAudit(tx, task, 'reconcile.launch_lost', { session_id: s.id, after_ms: bound });
      rt.log.warn({ task_id: s.task_id, session_id: s.id, after_ms: bound }, 'session reconciled: STARTING with no execution; its launch was lost');
      return { agent: s.agent };
    });
    if (done) {
      failed++;
      product.sessionFailed(done.agent, 'launch_lost');
    }
  }
  return failed;
}

/** An admitted execution, idle with no turn, under a session still STARTING: the start that launched it never recorded the launch. */
async function settleAdmittedStart(rt: OrchRuntime, suspect: Suspect): Promise<boolean> {
  return transact(rt, async (tx, emit) => {
    const s = await lockSessionIfFree(tx, suspect.id);
    if (!s || s.execution_id !== suspect.execution_id || s.state !== 'STARTING') return false;
    const task = (await getTask(tx, s.task_id))!;
    await changeSessionState(tx, emit, task, s, 'WAITING_FOR_INPUT', { reason: 'execution_ready' });
    await reconcilerAudit(tx, task, 'reconcile.launch_settled', { session_id: s.id, execution_id: s.execution_id });
    rt.log.warn(
      { task_id: s.task_id, session_id: s.id, execution_id: s.execution_id },
      'session reconciled: its execution is ready but the start never recorded it',
    );
    return true;
  });
}

async function markLost(rt: OrchRuntime, suspect: Suspect): Promise<boolean> {
  return transact(rt, async (tx, emit) => {
    // A session (or its task) held by a control action in flight is skipped this pass: waiting on it
    // would stall the reconciliation of every other session behind one slow request. Task before
    // session, the one lock order (ADR 0060): this may move the task to REVIEW.
    const task = await lockTaskIfFree(tx, suspect.task_id);
    const s = task ? await lockSessionIfFree(tx, suspect.id) : null;
    // Re-check under the guard: the session may have moved on since it was listed.
    if (!task || !s || s.task_id !== task.id || s.execution_id !== suspect.execution_id || s.state !== suspect.state) return false;
    const end = sessionStateAfterExecutionEnd('lost', null);
    await completeOpenTurns(tx, s.id, 'error');
    await changeSessionState(tx, emit, task, s, end.state, { error_message: end.error, reason: 'execution_lost' });
    // A held task's status is the hold's (R-4.2 "task statuses are not changed"): never the reconciler's.
    if (!(await activeHoldOfTask(tx, task.id))) await reviewTaskIfNothingActive(tx, emit, task.id, 'session_lost');
    await reconcilerAudit(tx, task, 'reconcile.session_lost', { session_id: s.id, execution_id: s.execution_id });
    rt.log.warn({ task_id: s.task_id, session_id: s.id, execution_id: s.execution_id }, 'session reconciled: its execution is gone from the registry');
    return true;
  });
}

/**
 * A task IN_PROGRESS with no active session and no session activity for STALLED_TASK_AFTER_MS
 * (a launch lost with its orchestrator, a failed start whose repair could not be written, a
 * restart) moves to REVIEW. Otherwise it would look busy forever and a stop would find nothing.
 *
 * Never a member of an active hold (a pause keeps every status, R-4.2; a cancel hold's CANCELLED
 * is the hold's), and never a task a resume or restore left IN_PROGRESS that has had no session
 * since: ADR 0025 — it keeps that status and was flagged for the operator at the release.
 */
async function repairStalledTasks(rt: OrchRuntime): Promise<number> {
  const bound = rt.env.STALLED_TASK_AFTER_MS;
  const stalled = await rt.sql<{ id: string }[]>`
    SELECT t.id FROM tasks t
    WHERE t.status = 'IN_PROGRESS' AND NOT t.office AND t.archived_at IS NULL AND t.updated_at < now() - make_interval(secs => ${bound / 1000})
      AND NOT EXISTS (
        SELECT 1 FROM sessions s WHERE s.task_id = t.id
          AND (s.state = ANY(${[...ACTIVE_SESSION_STATES]}) OR s.updated_at > now() - make_interval(secs => ${bound / 1000})))
      AND NOT EXISTS (SELECT 1 FROM tree_hold_members m WHERE m.task_id = t.id AND m.active)
      AND NOT ${restoredWithoutSessionSince(rt)}
    ORDER BY t.updated_at LIMIT 500`;
  let repaired = 0;
  for (const { id } of stalled) {
    const moved = await transact(rt, async (tx, emit) => {
      const task = await lockTask(tx, id);
      if (!task) return false;
      // Re-check under the task's lock: a hold may have taken it since the listing (a hold locks its members' rows too).
      if (await activeHoldOfTask(tx, id)) return false;
      // Re-check under the task's lock: a start may have happened since the listing.
      const next = statusOfStalledTask(task, (await activeSessionsOfTask(tx, id)).length);
      if (!next) return false;
      await changeTaskStatus(tx, emit, task, next, { actor: { type: 'system', id: 'reconciler' }, reason: 'no_active_session' });
      await reconcilerAudit(tx, task, 'reconcile.task_stalled', { from: task.status, to: next });
      return true;
    });
    if (moved) {
      repaired++;
      rt.log.warn({ task_id: id, after_ms: bound }, 'task reconciled: IN_PROGRESS with no active session, moved to REVIEW');
    }
  }
  return repaired;
}

/** Entries younger than this are left to the hold or launch that is acting on them right now. */
const SETTLED_MS = 5_000;

/**
 * B-4 under a hold: no member of an active hold may have a live process (R-4.2, R-4.5), whatever
 * its session says — an orphan under a FAILED session, one whose teardown request was lost, one
 * the hold's own registry listing missed. Each live entry of a held member that is not being torn
 * down is stopped (as an orphan: its session keeps its state) with the hold's reason. One listing
 * of the members' entries per pass (`listForTasks`); nothing when no hold is active.
 */
async function restopHeldMembers(rt: OrchRuntime, alreadySent: Set<string>): Promise<number> {
  const held = await rt.sql<{ task_id: string; workspace_id: string; mode: 'pause' | 'cancel' }[]>`
    SELECT m.task_id, h.workspace_id, h.mode FROM tree_hold_members m JOIN tree_holds h ON h.id = m.hold_id
    WHERE m.active ORDER BY h.created_at LIMIT 2000`;
  if (held.length === 0) return 0;
  let listed: Execution[];
  try {
    listed = await rt.registry.listForTasks(held.map((m) => m.task_id));
  } catch (e) {
    rt.log.warn({ err: e }, 'registry unreachable; held members reconciled next pass');
    return 0;
  }
  let restopped = 0;
  const memberOf = new Map(held.map((m) => [m.task_id, m]));
  for (const e of listed) {
    const member = memberOf.get(e.task_id);
    if (!member || !isLiveExecution(e.status) || e.status === 'STOPPING' || alreadySent.has(e.execution_id)) continue;
    if (Date.now() - Date.parse(e.updated_at) < SETTLED_MS) continue;
    const reason = member.mode === 'pause' ? StopReasons.treePause : StopReasons.treeCancel;
    alreadySent.add(e.execution_id);
    rt.log.warn(
      { task_id: member.task_id, session_id: e.session_id, execution_id: e.execution_id, status: e.status },
      'a member of an active hold has a live execution; stopping it',
    );
    await scheduleTeardown(rt, { requestId: `reconcile-held-${e.execution_id}` }, e, reason, true).catch((err) => rt.log.warn({ err }, 'restop failed'));
    await reconcilerAudit(rt.sql, { id: member.task_id, workspace_id: member.workspace_id }, 'reconcile.restop_held', {
      session_id: e.session_id,
      execution_id: e.execution_id,
      reason,
    }).catch((err) => rt.log.warn({ err }, 'audit write failed'));
    restopped++;
  }
  return restopped;
}

/**
 * ADR 0025: the task's status is the one a hold's release left it with (a resume keeps it, a
 * restore gives the snapshot back), and no session of it has been created or changed since: the
 * latest released hold it was a (not skipped) member of was released at or after every session
 * activity of the task.
 */
const restoredWithoutSessionSince = (rt: OrchRuntime) => rt.sql`EXISTS (
  SELECT 1 FROM tree_hold_members m JOIN tree_holds h ON h.id = m.hold_id
  WHERE m.task_id = t.id AND h.released_at IS NOT NULL AND m.skip_reason IS NULL AND m.task_status = 'IN_PROGRESS'
    AND h.released_at >= COALESCE((SELECT max(s.updated_at) FROM sessions s WHERE s.task_id = t.id), '-infinity'::timestamptz)
    AND NOT EXISTS (SELECT 1 FROM tree_holds later JOIN tree_hold_members lm ON lm.hold_id = later.id
                    WHERE lm.task_id = t.id AND later.created_at > h.released_at))`;

/** The session's open turn began before lifecycle last changed the execution, which is idle now: its end was never reported. */
async function closeLostTurn(rt: OrchRuntime, suspect: Suspect, execution: Execution): Promise<boolean> {
  return transact(rt, async (tx, emit) => {
    const s = await lockSessionIfFree(tx, suspect.id);
    if (!s || s.execution_id !== suspect.execution_id || s.state !== 'RUNNING') return false;
    const turn = await openTurn(tx, s.id);
    if (!turn || new Date(turn.started_at).getTime() >= Date.parse(execution.updated_at)) return false;
    const task = (await getTask(tx, s.task_id))!;
    rt.log.warn(
      { task_id: s.task_id, session_id: s.id, execution_id: s.execution_id, turn_id: turn.id },
      'turn reconciled: lifecycle reports the execution idle but its turn.completed never arrived',
    );
    await endTurn(rt, tx, emit, task, s, turn.id, 'lost', `reconcile-turn-${turn.id}`);
    await reconcilerAudit(tx, task, 'reconcile.turn_lost', { session_id: s.id, turn_id: turn.id });
    return true;
  });
}

/** Run reconcileOnce every interval until stopped. */
export function startReconciler(rt: OrchRuntime): () => void {
  return repeatEvery(
    rt.env.RECONCILE_INTERVAL_MS,
    () => reconcileOnce(rt),
    (e) => rt.log.warn({ err: e }, 'reconciliation failed'),
    'reconcile.sweep',
  );
}
