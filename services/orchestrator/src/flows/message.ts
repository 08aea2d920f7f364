import { actorLabel, isActiveSession, Life, notFound, type Actor, type QueuedMessage, type RequestOf, type OrchMcp } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { assertDirectParent, assertSameWorkspace } from '../domain/access.js';
import { assertQueueHasRoom, assertTakesMessages, queueEventMessage, sessionIsIdle } from '../domain/messages.js';
import { recordAudit, settleAudit } from '../store/audit.js';
import { claimNextMessage, enqueue, queueOfTask, queueSize, takeMessage } from '../store/queue.js';
import { activeSessionsOfTask, getSession, lockSession } from '../store/sessions.js';
import { getTask, shareTask } from '../store/tasks.js';
import { completeTurn, openTurn } from '../store/turns.js';
import type { SessionRow, TaskRow } from '../store/rows.js';
import { emitAgentCancelled } from './changes.js';
import type { Emit } from './context.js';
import { transact, type CallContext, type OrchRuntime } from './context.js';
import { once, type Idempotent } from './idempotency.js';
import { dispatchTurn } from './sessions.js';
import { startSession } from './start-session.js';
import type { Tx } from '@kandev/runtime';

type Status = 'queued' | 'sent' | 'started';
type MessageResult = { task_id: string; session_id: string | null; status: Status };

/** The task's queue as it is now (R-1.6: the queue is the task's), on the event of the session it concerns. */
export async function emitQueueChanged(tx: Tx, emit: Emit, task: { id: string; workspace_id: string }, sessionId: string | null) {
  const messages = await queueOfTask(tx, task.id);
  await emit(
    'queue.changed',
    { workspace_id: task.workspace_id, task_id: task.id, session_id: sessionId },
    { session_id: sessionId, size: messages.length, messages: messages.map(queueEventMessage) },
  );
}

/** The session a message goes to: the one named (it must belong to the task), else the newest active one. */
async function targetSession(rt: OrchRuntime, task: TaskRow, sessionId: string | undefined): Promise<SessionRow | null> {
  if (sessionId) {
    const s = await getSession(rt.sql, sessionId);
    if (!s || s.task_id !== task.id) throw notFound('session not found for this task');
    return s;
  }
  const active = await activeSessionsOfTask(rt.sql, task.id);
  return active.at(-1) ?? null;
}

/**
 * message_task_kandev. Queued: appended FIFO while a turn runs, delivered at once to an idle
 * session. Interrupt (direct parent only): under the per-session guard, store the message, cancel
 * the captured turn, and dispatch exactly this message; if that cannot land it stays queued.
 * Never an error after the message was stored.
 */
export async function messageTask(rt: OrchRuntime, call: CallContext, req: RequestOf<typeof OrchMcp.messageTask>): Promise<MessageResult> {
  // With an idempotency_key, a retry after a timeout gets the first answer and queues nothing more.
  return once<MessageResult>(rt, { scope: `agent:${req.caller_task_id}`, operation: 'orch.mcp.message_task', key: req.idempotency_key }, req, (idem) =>
    deliverMessage(rt, call, req, idem),
  );
}

async function deliverMessage(
  rt: OrchRuntime,
  call: CallContext,
  req: RequestOf<typeof OrchMcp.messageTask>,
  idem: Idempotent<MessageResult>,
): Promise<MessageResult> {
  const caller = await getTask(rt.sql, req.caller_task_id);
  if (!caller) throw notFound('calling task not found');
  const task = await getTask(rt.sql, req.task_id);
  if (!task) throw notFound('task not found');
  const mode = req.delivery_mode ?? 'queued';
  if (mode === 'interrupt') assertDirectParent(caller, task);
  else assertSameWorkspace(caller, task);
  // refused before anything is stored, whether or not a session of it still runs.
  assertTakesMessages(task);
  const actor: Actor = { type: 'agent', task_id: caller.id };
  const prompt = req.prompt;
  const log = rt.log.child({ task_id: task.id, caller_task_id: caller.id, request_id: call.requestId, delivery_mode: mode });

  const session = await targetSession(rt, task, req.session_id);
  if (!session || !isActiveSession(session.state)) {
    // Nobody is running: start a session with this message (R-1.8 "started"), by the one start rule.
    // The message is never lost to it: when a start of the task is already in flight it joins that
    // session's queue, and a paused member keeps it in the task's queue for its first session after
    // the release; both answer `queued`. A CANCELLED or archived task is CONFLICT.
    const started = await startSession(rt, call, { actor, task_id: task.id, prompt, sender_task_id: caller.id, live_session: 'join', keep_prompt: true });
    if (started.queued) return { task_id: task.id, session_id: started.session?.id ?? null, status: 'queued' as Status };
    return { task_id: task.id, session_id: started.session!.id, status: 'started' as Status };
  }

  // Store first, under the guard: from here on the message is never lost. An interrupt is audited
  // in this same transaction (B-3), as `queued`; delivery settles the row's outcome in its own.
  const { stored, auditId } = await storeMessage(rt, call, { task, session, caller, prompt, mode, actor });
  // Stored: from now on a retry must not store it again, whatever happens next.
  await idem.checkpoint({ task_id: task.id, session_id: session.id, status: 'queued' });

  let status: Status = 'queued';
  try {
    status = await transact(rt, (tx, emit) => deliverNow(rt, call, tx, emit, { task, session, caller, prompt, mode, stored, auditId }));
  } catch (e) {
    // The message is stored; it waits in the queue (R-1.8: never an error after the insert).
    log.warn({ err: e, message_id: stored.id }, 'immediate delivery failed; message stays queued');
    status = 'queued';
  }
  return { task_id: task.id, session_id: session.id, status };
}

/** What a message to a task's live session is: the task, its session, who sent what, how. */
interface Delivery {
  task: TaskRow;
  session: SessionRow;
  caller: TaskRow;
  prompt: string;
  mode: 'queued' | 'interrupt';
}

/**
 * Store first, under the guard: from here on the message is never lost. An interrupt is audited
 * in this same transaction (B-3), as `queued`; delivery settles the row's outcome in its own.
 */
async function storeMessage(rt: OrchRuntime, call: CallContext, d: Delivery & { actor: Actor }): Promise<{ stored: QueuedMessage; auditId: string | null }> {
  const { task, session, caller, prompt, mode, actor } = d;
  return transact(rt, async (tx, emit) => {
    // again, where it cannot race: a cancel committed since the check above refuses the
    // message here, before the insert; one that comes later waits for this insert to commit.
    const current = await shareTask(tx, task.id);
    if (!current) throw notFound('task not found');
    assertTakesMessages(current);
    const s = (await lockSession(tx, session.id))!;
    assertQueueHasRoom(await queueSize(tx, task.id), rt.env.QUEUE_LIMIT);
    const m = await enqueue(tx, { task_id: task.id, session_id: s.id, prompt, sender_task_id: caller.id, queued_by: actorLabel(actor) });
    const [, id] = await Promise.all([
      emitQueueChanged(tx, emit, task, s.id),
      mode === 'interrupt'
        ? recordAudit(tx, {
            task_id: task.id,
            workspace_id: task.workspace_id,
            action: 'mcp.message_task.interrupt',
            actor: actorLabel(actor),
            reason: null,
            request_id: call.requestId,
            outcome: 'queued',
            details: { session_id: s.id, message_id: m.id },
          })
        : null,
    ]);
    return { stored: m, auditId: id };
  });
}

/** The stored message delivered now if it can be, under the session's guard: `sent`, or `queued` when it waits its turn. */
async function deliverNow(
  rt: OrchRuntime,
  call: CallContext,
  tx: Tx,
  emit: Emit,
  d: Delivery & { stored: QueuedMessage; auditId: string | null },
): Promise<Status> {
  const { task, session, caller, prompt, mode, stored, auditId } = d;
  const s = (await lockSession(tx, session.id))!;
  if (!isActiveSession(s.state) || !s.execution_id || !s.instance_id) return 'queued';
  // after a user cancel a queued message waits for the operator too; an interrupt is the
  // parent's explicit "run this now" and still goes through.
  if (s.queue_paused && mode !== 'interrupt') return 'queued';
  if (!sessionIsIdle(s.state)) {
    if (mode !== 'interrupt') return 'queued';
    const turn = await openTurn(tx, s.id);
    const res = await request(
      rt.nc,
      Life.cancel.at(s.instance_id),
      { execution_id: s.execution_id, turn_id: turn?.id ?? null, escalate: false },
      { requestId: call.requestId, timeoutMs: rt.env.LIFECYCLE_CANCEL_WAIT_MS },
    );
    if (res.cancelled && res.turn_id) {
      const [closed] = await Promise.all([
        completeTurn(tx, res.turn_id, res.stop_reason ?? 'cancelled'),
        auditId ? settleAudit(tx, auditId, 'queued', { cancelled_turn_id: res.turn_id }) : null,
      ]);
      if (closed !== null)
        await emitAgentCancelled(emit, { workspace_id: task.workspace_id, task_id: task.id, session_id: s.id }, s.execution_id, res.turn_id, {
          type: 'agent',
          task_id: caller.id,
        });
    }
  }
  if (mode !== 'interrupt') {
    // Queued to an idle session: the task's queue runs in order, so what is older than
    // this message (left by an earlier session) goes first; this one is "sent" only if it is next.
    const delivered = await drainQueue(rt, call, tx, emit, task, s);
    return delivered === stored.id ? 'sent' : 'queued';
  }
  if (!(await takeMessage(tx, stored.id))) return 'queued'; // a drain already delivered it
  const turnId = await dispatchTurn(rt, call, tx, emit, task, { ...s, state: s.state === 'RUNNING' ? 'RUNNING' : s.state }, prompt, caller.id);
  await Promise.all([emitQueueChanged(tx, emit, task, s.id), auditId ? settleAudit(tx, auditId, 'sent', { turn_id: turnId }) : null]);
  return 'sent';
}

/**
 * Turn-ready handling: when a turn ends and the session is idle, deliver the oldest message of the
 * task's queue (unless an operator cancel paused the queue, R-3.5), whichever session it was queued
 * to: a stop leaves the queue stored and the task's next session delivers it. Runs inside
 * the caller's guard; the message is claimed under its row lock (exactly once across replicas).
 * Returns the id of the message delivered, or null.
 */
export async function drainQueue(
  rt: OrchRuntime,
  call: CallContext,
  tx: Tx,
  emit: Emit,
  task: { id: string; workspace_id: string },
  s: SessionRow,
): Promise<string | null> {
  if (s.queue_paused || !sessionIsIdle(s.state) || !s.execution_id || !s.instance_id) return null;
  const next = await claimNextMessage(tx, task.id);
  if (!next) return null;
  await dispatchTurn(rt, call, tx, emit, task, s, next.prompt, next.sender_task_id);
  await emitQueueChanged(tx, emit, task, s.id);
  return next.id;
}
