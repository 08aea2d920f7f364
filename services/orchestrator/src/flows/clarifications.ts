import { randomUUID } from 'node:crypto';
import {
  actorLabel,
  conflict,
  isActiveSession,
  notFound,
  type Actor,
  type ClarificationWait,
  type OrchClarification,
  type OrchMcpClarification,
  type RequestOf,
  type TaskClarifications,
} from '@kandev/contracts';
import type { Tx } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import {
  decideAnswers,
  decideCancel,
  decideExpiry,
  decideRejection,
  decideRelease,
  decideRenewal,
  pickActiveBundle,
  pinnedOf,
  questionsAsked,
  viewOf,
  type Decision,
} from '../domain/clarifications.js';
import { recordAudit } from '../store/audit.js';
import {
  bundlesOfTask,
  closeBundle,
  extendLease,
  getBundle,
  insertBundle,
  lockBundle,
  markDetached,
  updateQuestions,
  type BundleRow,
} from '../store/clarifications.js';
import { lockSessionAskingFor, lockSessionWithOpenTurn } from '../store/sessions.js';
import { assertBundleRoom } from './limits.js';
import { getTask } from '../store/tasks.js';
import { transact, type CallContext, type Emit, type OrchRuntime } from './context.js';
import { recordTranscript } from './transcript.js';

type McpReq<K extends keyof typeof OrchMcpClarification> = RequestOf<(typeof OrchMcpClarification)[K]>;
type OpReq<K extends keyof typeof OrchClarification> = RequestOf<(typeof OrchClarification)[K]>;

const scopeOf = (b: BundleRow, actor: Actor | null) => ({ workspace_id: b.workspace_id, task_id: b.task_id, session_id: b.session_id, actor });

function waitOf(rt: OrchRuntime, b: BundleRow): ClarificationWait {
  return {
    bundle: viewOf(b),
    expires_in_ms: b.status === 'pending' ? b.expires_in_ms : 0,
    renew_every_ms: Math.max(100, Math.floor(rt.env.CLARIFICATION_LEASE_MS / 3)),
  };
}

/** The bundle as the waiting tool call's task sees it: another task's bundle does not exist for it. */
async function lockOwnBundle(tx: Tx, callerTaskId: string, bundleId: string): Promise<BundleRow> {
  const b = await lockBundle(tx, bundleId);
  if (!b || b.task_id !== callerTaskId) throw notFound('clarification not found');
  return b;
}

/** Apply a decision under the bundle's row lock; a closing one publishes `clarification.closed`. */
async function apply(tx: Tx, emit: Emit, b: BundleRow, d: Decision, closedBy: Actor | null, label: string, reason: string | null): Promise<BundleRow> {
  await updateQuestions(tx, b.id, b.questions, d.questions);
  if (d.closes) await closeBundle(tx, b.id, { status: d.status, reason, closed_by: label, detach: d.detach });
  const after = (await getBundle(tx, b.id))!;
  if (d.closes) await emit('clarification.closed', scopeOf(after, closedBy), { bundle: pinnedOf(viewOf(after)) });
  return after;
}

/**
 * persist the agent's questions on its session's turn in flight, every question pending,
 * with the first waiter lease; publish `clarification.requested`. Under the session guard, so a
 * turn cancel or stop either sees this bundle (and detaches it) or happens first (and no turn is
 * open: CONFLICT).
 */
export async function askQuestions(rt: OrchRuntime, call: CallContext, req: McpReq<'ask'>): Promise<ClarificationWait> {
  const questions = questionsAsked(req.questions);
  const task = await getTask(rt.sql, req.caller_task_id);
  if (!task) throw notFound('calling task not found');
  const bundle = await transact(rt, async (tx, emit) => {
    const s = req.caller_session_id ? await lockSessionWithOpenTurn(tx, req.caller_session_id) : await lockSessionAskingFor(tx, task.id);
    if (req.caller_session_id && (!s || s.task_id !== task.id)) throw notFound('session not found');
    if (!s) throw conflict('no agent turn in flight to attach the questions to');
    if (!isActiveSession(s.state) || !s.open_turn_id)
      throw conflict('no agent turn in flight to attach the questions to', { session_id: s.id, state: s.state });
    // a session's pending bundles are bounded (counted under the session's row lock).
    await assertBundleRoom(rt, tx, s.id);
    const id = randomUUID();
    await insertBundle(tx, {
      id,
      task_id: task.id,
      workspace_id: task.workspace_id,
      session_id: s.id,
      turn_id: s.open_turn_id,
      wait_ms: rt.env.CLARIFICATION_TIMEOUT_MS,
      lease_ms: rt.env.CLARIFICATION_LEASE_MS,
      questions,
    });
    const b = (await getBundle(tx, id))!;
    await emit('clarification.requested', scopeOf(b, { type: 'agent', task_id: task.id, session_id: s.id }), { bundle: pinnedOf(viewOf(b)) });
    // the questions belong to the session's transcript too (the bundle keeps their answers).
    await recordTranscript(
      rt,
      tx,
      emit,
      { ...scopeOf(b, null), session_id: s.id },
      {
        turn_id: s.open_turn_id,
        role: 'agent',
        kind: 'question',
        text: questions.map((q) => q.text).join('\n'),
        meta: { bundle_id: id, question_ids: questions.map((q) => q.id) },
      },
    );
    return b;
  });
  rt.log.info(
    { task_id: task.id, session_id: bundle.session_id, turn_id: bundle.turn_id, bundle_id: bundle.id, request_id: call.requestId, questions: questions.length },
    'clarification requested',
  );
  return waitOf(rt, bundle);
}

/** The waiter's heartbeat: extend its lease while it is live, or record that it is gone. */
export async function renewWaiter(rt: OrchRuntime, req: McpReq<'renew'>): Promise<ClarificationWait> {
  const b = await transact(rt, async (tx) => {
    const b = await lockOwnBundle(tx, req.caller_task_id, req.bundle_id);
    const r = decideRenewal(b);
    if (r.kind === 'extend') await extendLease(tx, b.id, rt.env.CLARIFICATION_LEASE_MS);
    if (r.kind === 'detach') await markDetached(tx, b.id, r.reason);
    return r.kind === 'none' ? b : (await getBundle(tx, b.id))!;
  });
  return waitOf(rt, b);
}

/** The waiting call's client went away: detach the bundle at once (an operator's answer then resumes nobody). */
export async function releaseWaiter(rt: OrchRuntime, req: McpReq<'release'>): Promise<ClarificationWait> {
  let detached = false;
  const b = await transact(rt, async (tx) => {
    const b = await lockOwnBundle(tx, req.caller_task_id, req.bundle_id);
    const r = decideRelease(b);
    if (r.kind === 'none') return b;
    await markDetached(tx, b.id, r.reason);
    detached = true;
    return (await getBundle(tx, b.id))!;
  });
  if (detached) rt.log.info({ task_id: b.task_id, session_id: b.session_id, bundle_id: b.id }, 'clarification detached: the waiting call went away');
  return waitOf(rt, b);
}

/** The live waiter's wait ran out: its still-pending questions expire. Anything else is reported as it stands. */
export async function expireBundle(rt: OrchRuntime, req: McpReq<'expire'>): Promise<ClarificationWait> {
  const b = await transact(rt, async (tx, emit) => {
    const b = await lockOwnBundle(tx, req.caller_task_id, req.bundle_id);
    const d = decideExpiry(b);
    return d ? apply(tx, emit, b, d, null, 'system:clarification_timeout', null) : b;
  });
  if (b.status === 'expired') rt.log.info({ task_id: b.task_id, session_id: b.session_id, bundle_id: b.id }, 'clarification expired');
  return waitOf(rt, b);
}

export async function getClarification(rt: OrchRuntime, req: OpReq<'get'>) {
  const b = await getBundle(rt.sql, req.bundle_id);
  assertCanAccess(req.actor, b ? { id: b.id, workspace_id: b.workspace_id } : null, 'clarification');
  return viewOf(b!);
}

export async function clarificationsOfTask(rt: OrchRuntime, req: OpReq<'ofTask'>): Promise<TaskClarifications> {
  assertCanAccess(req.actor, await getTask(rt.sql, req.task_id));
  const bundles = (await bundlesOfTask(rt.sql, req.task_id)).map(viewOf);
  return { active: pickActiveBundle(bundles), bundles };
}

/**
 * answers or "skip all". The bundle's row lock makes concurrent responses take turns:
 * the first closes it, the next meets CONFLICT with the final state. Closing without a live waiter
 * (detached, superseded) persists the outcome and records the detachment, so nothing resumes the
 * agent from it.
 */
export async function respondToClarification(rt: OrchRuntime, call: CallContext, req: OpReq<'respond'>) {
  const label = actorLabel(req.actor);
  const reason = req.reason ?? null;
  const b = await transact(rt, async (tx, emit) => {
    const b = await lockBundle(tx, req.bundle_id);
    assertCanAccess(req.actor, b ? { id: b.id, workspace_id: b.workspace_id } : null, 'clarification');
    const d = req.rejected ? decideRejection(b!) : decideAnswers(b!, req.answers!);
    const after = await apply(tx, emit, b!, d, req.actor, label, req.rejected ? reason : null);
    await recordAudit(tx, {
      task_id: after.task_id,
      workspace_id: after.workspace_id,
      action: req.rejected ? 'clarification.reject' : 'clarification.answer',
      actor: label,
      reason,
      request_id: call.requestId,
      outcome: after.status,
      details: {
        bundle_id: after.id,
        session_id: after.session_id,
        agent_resumed: viewOf(after).agent_resumed,
        detached_reason: viewOf(after).detached_reason,
      },
    });
    return after;
  });
  const view = viewOf(b);
  rt.log.info(
    { task_id: b.task_id, session_id: b.session_id, bundle_id: b.id, status: b.status, agent_resumed: view.agent_resumed, request_id: call.requestId },
    'clarification response',
  );
  return view;
}

/** low-level cancel of a bundle a live waiter still holds (not the operator's "skip all"). */
export async function cancelClarification(rt: OrchRuntime, call: CallContext, req: OpReq<'cancel'>) {
  const label = actorLabel(req.actor);
  const reason = req.reason ?? null;
  const b = await transact(rt, async (tx, emit) => {
    const b = await lockBundle(tx, req.bundle_id);
    assertCanAccess(req.actor, b ? { id: b.id, workspace_id: b.workspace_id } : null, 'clarification');
    const after = await apply(tx, emit, b!, decideCancel(b!), req.actor, label, reason);
    await recordAudit(tx, {
      task_id: after.task_id,
      workspace_id: after.workspace_id,
      action: 'clarification.cancel',
      actor: label,
      reason,
      request_id: call.requestId,
      outcome: 'cancelled',
      details: { bundle_id: after.id, session_id: after.session_id },
    });
    return after;
  });
  rt.log.info({ task_id: b.task_id, session_id: b.session_id, bundle_id: b.id, request_id: call.requestId }, 'clarification cancelled');
  return viewOf(b);
}
