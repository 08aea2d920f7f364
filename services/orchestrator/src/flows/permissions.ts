import { randomUUID } from 'node:crypto';
import {
  actorLabel,
  conflict,
  isKandevError,
  LifePermission,
  permissionEventData,
  type EventEnvelope,
  type OrchPermission,
  type PermissionAnswered,
  type PermissionRequest,
  type RequestOf,
} from '@kandev/contracts';
import { isNoResponders, processOnce, request, type Tx } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import { AGENT_CLOSER, checkAnswer, closureOf, STOPPED_CLOSER, type OperatorAnswer } from '../domain/permissions.js';
import { recordAudit, type AuditRecord } from '../store/audit.js';
import { cancelPendingOfExecution, closePermission, insertPermission, lockPermission, permissionsOfTask } from '../store/permissions.js';
import { getSession } from '../store/sessions.js';
import { getTask } from '../store/tasks.js';
import { transact, type CallContext, type Emit, type OrchRuntime } from './context.js';
import { recordTranscript } from './transcript.js';

/*
 * Permission requests. Rows come from the lifecycle's `agent.permission_requested` /
 * `agent.permission_resolved` events (consumed once each, inbox, B-5) and from an operator's answer,
 * which goes to the owning agentctl while the row is locked. agentctl's pending table decides
 * between an answer and a turn cancel; the row follows what agentctl did, through one transition
 * out of `pending` (store closePermission), so exactly one closer wins and the row never disagrees
 * with the agent.
 */

type RespondReq = RequestOf<typeof OrchPermission.respond>;
type AgentPermissionEvent = EventEnvelope<'agent.permission_requested'> | EventEnvelope<'agent.permission_resolved'>;

export const AGENT_PERMISSION_EVENT_TYPES = ['agent.permission_requested', 'agent.permission_resolved'] as const;
export const isAgentPermissionEvent = (ev: EventEnvelope): ev is AgentPermissionEvent => (AGENT_PERMISSION_EVENT_TYPES as readonly string[]).includes(ev.type);

const scopeOf = (p: PermissionRequest) => ({ workspace_id: p.workspace_id, task_id: p.task_id, session_id: p.session_id });

const auditOf = (
  p: PermissionRequest,
  action: string,
  actor: string,
  reason: string | null,
  requestId: string | null,
  outcome: string,
  details: Record<string, unknown> = {},
): AuditRecord => ({
  task_id: p.task_id,
  workspace_id: p.workspace_id,
  action,
  actor,
  reason,
  request_id: requestId,
  outcome,
  details: { permission_request_id: p.id, permission_id: p.permission_id, session_id: p.session_id, execution_id: p.execution_id, ...details },
});

/** GET /tasks/:id/permissions. */
export async function permissionsOfTaskFor(rt: OrchRuntime, req: RequestOf<typeof OrchPermission.ofTask>): Promise<PermissionRequest[]> {
  assertCanAccess(req.actor, await getTask(rt.sql, req.task_id));
  return permissionsOfTask(rt.sql, req.task_id);
}

/** What the owning agentctl said about the answer, or why it could not say. */
type AgentVerdict = { kind: 'answered'; answer: PermissionAnswered } | { kind: 'settled_before'; answer: PermissionAnswered } | { kind: 'gone'; why: string };

/**
 * POST /permissions/:id/respond. Under the row lock: refuse a closed request or an option the agent
 * did not offer, send the answer to the owning agentctl, and close the row as agentctl settled it.
 * When agentctl had already settled it another way (a turn cancel got there first) or the agent is
 * gone, the row is closed as it really ended and the answer is CONFLICT; a lifecycle that does not
 * answer in time (UNAVAILABLE) changes nothing, and the resolution event closes the row if the
 * answer did land.
 */
export async function respondToPermission(rt: OrchRuntime, call: CallContext, req: RespondReq): Promise<PermissionRequest> {
  const label = actorLabel(req.actor);
  const reason = req.reason ?? null;
  const answer: OperatorAnswer = req.cancelled ? { cancelled: true } : { option_id: req.option_id! };
  const log = rt.log.child({ permission_request_id: req.permission_request_id, request_id: call.requestId });
  // Known once the row is read and access checked; refusals before that are only answered.
  let seen: PermissionRequest | null = null;
  let audited = false;
  try {
    const { row, refusal } = await transact(rt, async (tx, emit) => {
      const locked = await lockPermission(tx, req.permission_request_id);
      const p = assertCanAccess(req.actor, locked, 'permission request');
      seen = p;
      checkAnswer(p, answer);
      const verdict = await askAgent(rt, tx, call, p, answer);
      const closer = verdict.kind === 'answered' ? label : AGENT_CLOSER;
      const closure = verdict.kind === 'gone' ? closureOf('cancelled', null, closer) : closureOf(verdict.answer.outcome, verdict.answer.option_id, closer);
      const closed = await closePermission(tx, { id: p.id }, closure);
      // The row is locked: nothing else can have closed it since checkAnswer.
      if (!closed) throw new Error('permission request closed under its own row lock');
      await emit('permission.closed', { ...scopeOf(closed), actor: verdict.kind === 'answered' ? req.actor : null }, permissionEventData(closed));
      const outcome =
        verdict.kind === 'answered' ? closed.status : verdict.kind === 'gone' ? 'conflict:agent_gone' : `conflict:already_${verdict.answer.outcome}`;
      await recordAudit(
        tx,
        auditOf(closed, req.cancelled ? 'permission.cancel' : 'permission.answer', label, reason, call.requestId, outcome, {
          option_id: req.option_id ?? null,
          chosen_option_id: closed.chosen_option_id,
        }),
      );
      const refusal =
        verdict.kind === 'answered'
          ? null
          : conflict(
              verdict.kind === 'gone'
                ? `the agent is no longer waiting on this permission request (${verdict.why})`
                : `permission request was already ${closed.status} by the agent`,
              {
                status: closed.status,
                chosen_option_id: closed.chosen_option_id,
                closed_by: closed.closed_by,
              },
            );
      return { row: closed, refusal };
    });
    audited = true; // committed with its audit row, whether it answered or found the request settled
    log.info(
      { task_id: row.task_id, session_id: row.session_id, status: row.status, chosen_option_id: row.chosen_option_id, refused: refusal !== null },
      'permission response',
    );
    if (refusal) throw refusal;
    return row;
  } catch (e) {
    // A refusal that changed nothing (closed already, unknown option, lifecycle unavailable) is still a control action tried: audit it.
    const p: PermissionRequest | null = seen;
    if (p && !audited) {
      await recordAudit(
        rt.sql,
        auditOf(p, req.cancelled ? 'permission.cancel' : 'permission.answer', label, reason, call.requestId, isKandevError(e) ? `error:${e.code}` : 'error', {
          option_id: req.option_id ?? null,
        }),
      ).catch((err: unknown) => log.warn({ err }, 'audit write failed'));
    }
    throw e;
  }
}

/** Sends the answer to the lifecycle instance that owns the request's execution. */
async function askAgent(rt: OrchRuntime, tx: Tx, call: CallContext, p: PermissionRequest, answer: OperatorAnswer): Promise<AgentVerdict> {
  const s = await getSession(tx, p.session_id);
  // The session runs another execution now (or none): the one that asked is gone, and its agent with it.
  if (!s || s.execution_id !== p.execution_id || !s.instance_id) return { kind: 'gone', why: 'its execution was replaced or ended' };
  try {
    const res = await request(
      rt.nc,
      LifePermission.respond.at(s.instance_id),
      { execution_id: p.execution_id, permission_id: p.permission_id, ...answer },
      // The same bound as a prompt hand-off inside a guard: agentctl settles it in milliseconds.
      { requestId: call.requestId, timeoutMs: rt.env.LIFECYCLE_PROMPT_WAIT_MS },
    );
    return { kind: 'answered', answer: res };
  } catch (e) {
    if (!isKandevError(e)) throw e;
    if (e.code === 'CONFLICT' && typeof e.details?.outcome === 'string') {
      const outcome = e.details.outcome === 'allowed' || e.details.outcome === 'denied' ? e.details.outcome : 'cancelled';
      return {
        kind: 'settled_before',
        answer: { permission_id: p.permission_id, outcome, option_id: typeof e.details.option_id === 'string' ? e.details.option_id : null },
      };
    }
    // The owner has no such execution or request any more, or the agent is not running.
    if (e.code === 'NOT_FOUND' || e.code === 'CONFLICT') return { kind: 'gone', why: e.message };
    // No lifecycle instance serves the owner's subjects: it died, and its agents with it (B-4).
    if (isNoResponders(e)) return { kind: 'gone', why: 'its lifecycle instance is gone' };
    throw e;
  }
}

/**
 * The lifecycle's report of a request (consumed through the orchestrator's lifecycle consumer, once
 * per event id): record it pending, or close it as agentctl settled it. Either may arrive first;
 * the row is created by whichever does, and a second creation changes nothing.
 */
export async function onAgentPermissionEvent(rt: OrchRuntime, consumer: string, ev: AgentPermissionEvent): Promise<void> {
  const { session_id: sessionId, task_id: taskId } = ev;
  if (!sessionId || !taskId) return;
  const staged: EventEnvelope[] = [];
  await processOnce(rt.sql, consumer, ev.id, async (tx) => {
    const emit: Emit = async (type, scope, data) => void staged.push(await rt.outbox.add(tx, type, scope, data));
    const task = await getTask(tx, taskId);
    if (!task) return;
    const base = {
      id: randomUUID(),
      workspace_id: task.workspace_id,
      task_id: task.id,
      session_id: sessionId,
      execution_id: ev.data.execution_id,
      permission_id: ev.data.permission_id,
      turn_id: ev.data.turn_id,
    };
    if (ev.type === 'agent.permission_requested') {
      const created = await insertPermission(tx, { ...base, title: ev.data.title, options: ev.data.options });
      if (!created) return;
      await emit(
        'permission.requested',
        { ...scopeOf(created), actor: { type: 'agent', task_id: task.id, session_id: sessionId } },
        permissionEventData(created),
      );
      // In the transcript too, where the operator reads what the agent was doing when it asked.
      await recordTranscript(rt, tx, emit, scopeOf(created), {
        turn_id: created.turn_id,
        role: 'agent',
        kind: 'permission_request',
        text: created.title,
        meta: { permission_request_id: created.id, options: created.options },
      });
      rt.log.info({ task_id: task.id, session_id: sessionId, permission_request_id: created.id, execution_id: created.execution_id }, 'permission requested');
      return;
    }
    const closure = closureOf(ev.data.outcome, ev.data.option_id, AGENT_CLOSER);
    let closed = await closePermission(tx, { execution_id: ev.data.execution_id, permission_id: ev.data.permission_id }, closure);
    // Its resolution came first: record the request closed, so the later `requested` finds it and adds nothing.
    if (!closed && ev.data.asked) closed = await insertPermission(tx, { ...base, ...ev.data.asked }, closure);
    if (!closed) return; // already closed (by the operator's answer, or an earlier copy of this report)
    await emit('permission.closed', scopeOf(closed), permissionEventData(closed));
    await recordAudit(
      tx,
      auditOf(
        closed,
        'permission.closed',
        'system:lifecycle',
        `the agent's request ended ${ev.data.outcome} without an operator's answer (a turn cancel or stop, the turn's end)`,
        null,
        closed.status,
        { event_id: ev.id },
      ),
    );
  });
  await rt.outbox.flush(staged);
}

/**
 * An execution stopped: whatever it still had pending (its resolution lines were lost with a
 * killed agentctl) is cancelled. Runs inside the consumer's transaction for `execution.stopped`.
 */
export async function cancelPermissionsOfStoppedExecution(tx: Tx, emit: Emit, ev: EventEnvelope<'execution.stopped'>): Promise<void> {
  const closed = await cancelPendingOfExecution(tx, ev.data.execution_id, STOPPED_CLOSER);
  for (const p of closed) {
    await emit('permission.closed', scopeOf(p), permissionEventData(p));
    await recordAudit(tx, auditOf(p, 'permission.closed', 'system:lifecycle', `execution stopped (${ev.data.reason})`, null, 'cancelled', { event_id: ev.id }));
  }
}
