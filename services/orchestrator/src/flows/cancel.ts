import {
  actorLabel,
  conflict,
  isActiveSession,
  isKandevError,
  KandevError,
  Life,
  notFound,
  type Actor,
  type EventType,
  type ResultOf,
} from '@kandev/contracts';
import { product, request, type EventScope, type Logger, type Tx } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import { mayMoveToReview, sessionStateAfterTurn } from '../domain/transitions.js';
import { StopReasons, type StopPlan } from '../domain/stop.js';
import { DetachReasons } from '../domain/clarifications.js';
import { recordAudit, type AuditRecord } from '../store/audit.js';
import { detachPendingBundles } from '../store/clarifications.js';
import { lockSessionWithOpenTurn, sessionStatesOfTask, setQueuePaused, setSessionState, stampStoppedNow, type GuardedSession } from '../store/sessions.js';
import { lockTask } from '../store/tasks.js';
import { toSession } from '../store/rows.js';
import { completeTurn } from '../store/turns.js';
import { changeTaskStatus, emitAgentCancelled } from './changes.js';
import { afterReply, mark, transact, type CallContext, type Committed, type Emit, type OrchRuntime } from './context.js';
import { acceptStops } from './stop-decision.js';

/** The lifecycle's answer to a cancel it escalated (services/lifecycle domain/cancel.ts): the agent is being torn down. */
const isEscalation = (e: unknown): e is KandevError => isKandevError(e) && e.code === 'CONFLICT' && e.details?.escalation === 'teardown';

/**
 * cancel the in-flight turn without killing the agent. Runs under the per-session guard,
 * so it is serialised with stops, interrupts and queue drains; names the execution and the
 * turn it captured (B-2). No turn in flight → success, nothing changes.
 */
export async function cancelAgentTurn(rt: OrchRuntime, call: CallContext, actor: Actor, sessionId: string, reason: string | null) {
  const log = rt.log.child({ session_id: sessionId, request_id: call.requestId });
  // Known once the session is read; audits of refusals before that have no task to hang on.
  let task: { id: string; workspace_id: string } | null = null;
  const audit = (outcome: string) => ({
    task_id: task!.id,
    workspace_id: task!.workspace_id,
    action: 'agent.cancel',
    actor: actorLabel(actor),
    reason,
    request_id: call.requestId,
    outcome,
    details: { session_id: sessionId },
  });
  try {
    // One plain transaction, each step awaited in turn (ADR 0033): BEGIN; lookup, access check and
    // guard; the owner's answer; the writes; the outbox rows; COMMIT. The answer goes at commit, the
    // events once it is sent. A cancel is latency-critical.
    const { result, publish } = await transact(
      rt,
      async (tx, emit) => {
        const s = await lockSessionWithOpenTurn(tx, sessionId);
        mark('cancel.locked');
        if (!s) throw notFound('session not found');
        task = assertCanAccess(actor, { id: s.task_id, workspace_id: s.workspace_id }, 'session');
        if (!isActiveSession(s.state) || !s.execution_id || !s.instance_id) throw conflict('agent not running', { state: s.state });
        let res;
        try {
          res = await request(
            rt.nc,
            Life.cancel.at(s.instance_id),
            { execution_id: s.execution_id, turn_id: s.open_turn_id },
            { requestId: call.requestId, timeoutMs: rt.env.LIFECYCLE_CANCEL_WAIT_MS },
          );
        } catch (e) {
          if (!isEscalation(e)) throw e;
          return { escalated: await recordEscalation(tx, emit, s, e, actor, audit) };
        }
        mark('cancel.answered');
        return recordCancelledTurn(tx, emit, s, res, actor, audit);
      },
      { publish: 'later' },
    );
    // Committed: an operator's cancel (the API) or an agent's (its MCP tool, through the same endpoint).
    const source = actor.type === 'agent' ? 'parent_agent' : 'operator';
    if (result && 'escalated' in result) return await afterEscalation(rt, call, log, actor, result.escalated, publish);
    if (result) {
      product.turnCancelled(source);
      log.info({ task_id: result.s.task_id, execution_id: result.s.execution_id, turn_id: result.res.turn_id }, 'turn cancelled');
    }
    // Committed: the reply goes first, the events once it is sent.
    afterReply(call, publish);
  } catch (e) {
    if (isEscalation(e) && e.details?.session_state === 'CANCELLED') throw e; // committed and audited above
    const refusedBeforeLookup = task === null || (isKandevError(e) && (e.code === 'NOT_FOUND' || e.code === 'FORBIDDEN'));
    if (!refusedBeforeLookup)
      await recordAudit(rt.sql, audit(isKandevError(e) ? `error:${e.code}` : 'error')).catch((err) => log.warn({ err }, 'audit write failed'));
    throw e;
  }
  return { success: true as const, session_id: sessionId };
}

type CancelAudit = (outcome: string) => AuditRecord;
type Escalated = { s: GuardedSession; error: KandevError; cancelled: boolean };

/**
 * the agent did not acknowledge and its owner is tearing it down. That is a stop of the
 * session, recorded as the stop pipeline records one (CANCELLED with a fixed reason, the open turn
 * closed, its questions detached), not the crash the execution's end would otherwise read as. The
 * teardown is already under way at the owner: none is sent.
 */
async function recordEscalation(tx: Tx, emit: Emit, s: GuardedSession, e: KandevError, actor: Actor, audit: CancelAudit): Promise<Escalated> {
  const execution_id = s.execution_id!;
  const instance_id = s.instance_id!;
  // the agent did not acknowledge and its owner is tearing it down. That is a stop of
  // the session, recorded as the stop pipeline records one (CANCELLED with a fixed reason, the
  // open turn closed, its questions detached), not the crash the execution's end would
  // otherwise read as. The teardown is already under way at the owner: none is sent.
  const plan: StopPlan = {
    reason: StopReasons.cancelUnacknowledged,
    cancel: [{ session_id: s.id, execution: { execution_id: execution_id, session_id: s.id, instance_id, listed: false } }],
    halt: [],
    gone: [],
  };
  // The session is CANCELLED now, not when this transaction began (its now(), before the
  // cancel timeout was waited out): R-10.5's bound runs from the logical cancel, and the
  // invariant checker reads it off the row. The turn the stop closed ends at the same instant
  // (as a stop's turn ends with its session). Its event carries the row as stamped.
  const staged: Array<[EventType, EventScope, unknown]> = [];
  const stage: Emit = async (type, scope, data) => void staged.push([type, scope, data]);
  const accepted = await acceptStops(tx, stage, plan, [s], s.workspace_id, actor);
  const [stamped] = accepted.cancelled.length ? [await stampStoppedNow(tx, s.id)] : [];
  for (const [type, scope, data] of staged) {
    const body = type === 'session.state_changed' && stamped ? { ...(data as object), session: toSession(stamped) } : data;
    await emit(type, scope, body as never);
  }
  await recordAudit(tx, { ...audit('escalated'), details: { session_id: s.id, ...e.details } });
  return { s, error: e, cancelled: accepted.cancelled.length > 0 };
}

/** The owner answered the cancel: nothing in flight (audited), or the turn closed, the session waiting for input, the queue paused. */
async function recordCancelledTurn(tx: Tx, emit: Emit, s: GuardedSession, res: ResultOf<typeof Life.cancel>, actor: Actor, audit: CancelAudit) {
  if (!res.cancelled) {
    await recordAudit(tx, audit('no_active_turn'));
    return null;
  }
  const next = sessionStateAfterTurn(s.state);
  // what is queued waits for the operator after a user cancel. Set while we still hold
  // the guard, so the turn-completed handler that waits on it cannot drain the queue first.
  // Awaited before the state write, which writes the same row and returns it for the event.
  await setQueuePaused(tx, s.id, true);
  const [, after] = await Promise.all([
    res.turn_id ? completeTurn(tx, res.turn_id, res.stop_reason ?? 'cancelled') : null,
    next ? setSessionState(tx, s.id, next) : null,
    recordAudit(tx, audit('cancelled')),
    // the cancelled turn's questions have nobody waiting on them any more.
    detachPendingBundles(tx, [s.id], DetachReasons.turnCancelled),
  ]);
  const scope = { workspace_id: s.workspace_id, task_id: s.task_id, session_id: s.id };
  if (after) await emit('session.state_changed', { ...scope, actor }, { session: toSession(after), from: s.state, to: after.state, reason: 'turn_cancelled' });
  if (res.turn_id) await emitAgentCancelled(emit, scope, s.execution_id!, res.turn_id, actor);
  return { s, res };
}

/**
 * Committed: the agent ignored the cancel and is being torn down, which is a stop of its session.
 * The task follows the stop pipeline's rule, in a transaction of its own: the cancel's held
 * the session's guard, and the task's lock is taken before a session's, never after. Answers the
 * cancel with CONFLICT saying what happens next.
 */
async function afterEscalation(
  rt: OrchRuntime,
  call: CallContext,
  log: Logger,
  actor: Actor,
  escalated: Escalated,
  publish: Committed<unknown>['publish'],
): Promise<never> {
  const { s, error, cancelled } = escalated;
  if (cancelled) product.sessionsStopped(actor.type === 'agent' ? 'parent_agent' : 'operator', 1);
  log.warn({ task_id: s.task_id, execution_id: s.execution_id, details: error.details }, 'agent did not acknowledge the cancel; it is being torn down');
  const review = cancelled
    ? await reviewAfterEscalation(rt, s.task_id, actor).catch((err: unknown) => {
        log.error({ err }, 'REVIEW transition after an escalated cancel failed; the stop stands');
        return null;
      })
    : null;
  afterReply(call, () => Promise.all([publish(), review?.publish()]));
  throw conflict(error.message, { ...error.details, session_id: s.id, session_state: 'CANCELLED' });
}

/**
 * R-1.4's guarded REVIEW after an escalated cancel's stop: only from IN_PROGRESS or SCHEDULING, not
 * archived, not office-managed, no other session of the task still working. The task row is locked
 * first, then its sessions read; the write is changeTaskStatus's. Its event is published when the
 * caller says (after the reply).
 */
async function reviewAfterEscalation(rt: OrchRuntime, taskId: string, actor: Actor): Promise<Committed<void>> {
  return transact(
    rt,
    async (tx, emit) => {
      const row = await lockTask(tx, taskId);
      if (row && mayMoveToReview(row, await sessionStatesOfTask(tx, taskId))) await changeTaskStatus(tx, emit, row, 'REVIEW', { actor, reason: 'stopped' });
    },
    { publish: 'later' },
  );
}
