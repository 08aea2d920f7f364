import { randomUUID } from 'node:crypto';
import { conflict, isKandevError, Life, notFound, type Actor } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import { senderContext, sessionIsIdle } from '../domain/messages.js';
import { statusOnSessionStart } from '../domain/transitions.js';
import { attachExecution, getSession, hasActiveSession, hasPrimarySession, insertSession, lockSession, setQueuePaused } from '../store/sessions.js';
import { getTask, lockTask } from '../store/tasks.js';
import { insertTurn, turnsOfSession } from '../store/turns.js';
import { toSession, type SessionRow, type TaskRow } from '../store/rows.js';
import { changeSessionState, changeTaskStatus } from './changes.js';
import { transact, type CallContext, type OrchRuntime } from './context.js';

export interface StartedSession {
  session: SessionRow;
  turn_id: string | null;
}

/**
 * Start a session: record it (STARTING) and move the task to IN_PROGRESS under the task's row
 * lock, capturing the launch fence epoch; then launch. The lifecycle service asks us to admit
 * the execution when it registers (orch.execution.admit), which refuses it if a stop bumped the
 * fence meanwhile (B-1).
 */
export async function startSession(
  rt: OrchRuntime,
  call: CallContext,
  opts: { actor: Actor; task_id: string; agent?: string | undefined; prompt?: string | undefined; sender_task_id?: string | null },
): Promise<StartedSession> {
  const turnId = opts.prompt ? randomUUID() : null;
  const context = await contextFor(rt.sql, opts.sender_task_id);
  const { task, session, epoch, statusBefore } = await transact(rt, async (tx, emit) => {
    const locked = await lockTask(tx, opts.task_id);
    if (!locked) throw notFound('task not found');
    if (locked.archived_at) throw conflict('task is archived');
    const primary = !(await hasPrimarySession(tx, locked.id));
    const session = await insertSession(tx, { task_id: locked.id, agent: opts.agent ?? locked.agent ?? rt.env.DEFAULT_AGENT, state: 'STARTING', is_primary: primary });
    await emit('session.state_changed', { workspace_id: locked.workspace_id, task_id: locked.id, session_id: session.id, actor: opts.actor }, { session: toSession(session), from: null, to: 'STARTING', reason: 'session_started' });
    if (turnId) await insertTurn(tx, { id: turnId, session_id: session.id, execution_id: null, prompt: opts.prompt!, sender_task_id: opts.sender_task_id ?? null });
    const next = statusOnSessionStart(locked.status);
    const task = next ? await changeTaskStatus(tx, emit, locked, next, { actor: opts.actor, reason: 'session_started' }) : locked;
    return { task, session, epoch: locked.fence_epoch, statusBefore: locked.status };
  });
  const log = rt.log.child({ task_id: task.id, session_id: session.id, request_id: call.requestId });
  try {
    const execution = await request(
      rt.nc,
      Life.launch,
      {
        execution_id: randomUUID(),
        task_id: task.id,
        session_id: session.id,
        workspace_id: task.workspace_id,
        agent: session.agent!,
        fence_epoch: epoch,
        mcp_mode: task.office ? 'office' : 'task',
        ...(opts.prompt && turnId ? { prompt: opts.prompt, turn_id: turnId, ...(context ? { context } : {}) } : {}),
      },
      { timeoutMs: rt.env.LAUNCH_TIMEOUT_MS, requestId: call.requestId },
    );
    log.info({ execution_id: execution.execution_id, pid: execution.pid }, 'execution launched');
    const updated = await transact(rt, async (tx, emit) => {
      const s = (await lockSession(tx, session.id))!;
      // Admission recorded the execution; make sure the owner instance is known too (commands are routed to it).
      if (s.execution_id === execution.execution_id && s.instance_id !== execution.instance_id) await attachExecution(tx, s.id, execution.execution_id, execution.instance_id);
      if (s.state !== 'STARTING') return s; // a stop or a fast first turn got there first
      return changeSessionState(tx, emit, task, s, turnId ? 'RUNNING' : 'WAITING_FOR_INPUT', { reason: 'execution_ready' });
    });
    return { session: updated, turn_id: turnId };
  } catch (e) {
    log.warn({ err: e }, 'launch failed');
    await failStartingSession(rt, task, session.id, isKandevError(e) ? e.message : 'launch failed', statusBefore);
    throw e;
  }
}

/**
 * The launch failed or was refused (overload): the session is FAILED, and the task goes back to the
 * status it had unless something else is running on it, so it does not say IN_PROGRESS with nothing
 * running (issue 11).
 */
async function failStartingSession(rt: OrchRuntime, task: TaskRow, sessionId: string, message: string, statusBefore: TaskRow['status']) {
  await transact(rt, async (tx, emit) => {
    // Session guard first, then the task row: the order every event handler takes.
    const s = (await lockSession(tx, sessionId))!;
    if (s.state !== 'STARTING') return;
    const locked = await lockTask(tx, task.id);
    await changeSessionState(tx, emit, task, s, 'FAILED', { error_message: message, reason: 'launch_failed' });
    if (locked && locked.status === 'IN_PROGRESS' && statusBefore !== 'IN_PROGRESS' && !(await hasActiveSession(tx, task.id))) {
      await changeTaskStatus(tx, emit, locked, statusBefore, { reason: 'session_start_failed' });
    }
  });
}

export async function sessionDetail(rt: OrchRuntime, actor: Actor, sessionId: string) {
  // One snapshot for the session and its turns: a turn never shows as finished while its session still says RUNNING.
  const snapshot = await rt.sql.begin('isolation level repeatable read read only', async (tx) => {
    const session = await getSession(tx, sessionId);
    if (!session) throw notFound('session not found');
    assertCanAccess(actor, await getTask(tx, session.task_id), 'session');
    return { session, turns: await turnsOfSession(tx, sessionId) };
  });
  const { session, turns } = snapshot as { session: SessionRow; turns: Awaited<ReturnType<typeof turnsOfSession>> };
  const execution = session.execution_id ? await request(rt.nc, Life.get, { execution_id: session.execution_id, task_id: session.task_id }).catch(() => null) : null;
  return {
    ...toSession(session),
    execution: execution ? { execution_id: execution.execution_id, status: execution.status, pid: execution.pid, protocol: execution.protocol } : null,
    turns,
  };
}

/**
 * Operator prompt: under the per-session guard, an idle session starts a turn now. A prompt
 * also resumes a queue an operator cancel paused.
 */
export async function promptSession(rt: OrchRuntime, call: CallContext, actor: Actor, sessionId: string, prompt: string) {
  const session = await getSession(rt.sql, sessionId);
  if (!session) throw notFound('session not found');
  const task = assertCanAccess(actor, await getTask(rt.sql, session.task_id), 'session');
  return transact(rt, async (tx, emit) => {
    const s = (await lockSession(tx, sessionId))!;
    if (!s.execution_id || !s.instance_id || !sessionIsIdle(s.state)) {
      throw conflict(s.state === 'RUNNING' ? 'a turn is already in flight' : `session is ${s.state}; agent not running`, { state: s.state });
    }
    const turn = await dispatchTurn(rt, call, tx, emit, task, s, prompt, null);
    await setQueuePaused(tx, s.id, false);
    return { turn_id: turn };
  });
}

/**
 * Start a turn on an idle session inside the caller's guarded transaction: record the turn,
 * mark the session RUNNING, hand the prompt to the owner instance. Throws if the agent refuses,
 * which rolls the transaction back.
 */
export async function dispatchTurn(
  rt: OrchRuntime,
  call: CallContext,
  tx: Parameters<Parameters<typeof transact>[1]>[0],
  emit: Parameters<Parameters<typeof transact>[1]>[1],
  task: { id: string; workspace_id: string },
  s: SessionRow,
  prompt: string,
  senderTaskId: string | null,
): Promise<string> {
  const turn = await insertTurn(tx, { session_id: s.id, execution_id: s.execution_id, prompt, sender_task_id: senderTaskId });
  await changeSessionState(tx, emit, task, s, 'RUNNING', { reason: 'turn_started' });
  const context = await contextFor(tx, senderTaskId);
  await request(rt.nc, Life.prompt.at(s.instance_id!), { execution_id: s.execution_id!, turn_id: turn.id, prompt, ...(context ? { context } : {}) }, { requestId: call.requestId });
  return turn.id;
}

/** Sender attribution for a message from another task, or nothing for an operator's prompt. */
async function contextFor(q: Parameters<typeof getTask>[0], senderTaskId: string | null | undefined): Promise<string | undefined> {
  if (!senderTaskId) return undefined;
  const sender = await getTask(q, senderTaskId);
  return sender ? senderContext(sender) : undefined;
}
