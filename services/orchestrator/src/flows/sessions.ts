import { randomUUID } from 'node:crypto';
import { actorLabel, conflict, isKandevError, Life, notFound, type Actor, type QueuedMessage, type TaskStatus } from '@kandev/contracts';
import { recordAudit } from '../store/audit.js';
import { product, request } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import { assertQueueHasRoom, senderContext, sessionIsIdle } from '../domain/messages.js';
import { earlyRefusal, refusalError, sessionStartVerdict, StartRefusals, type LiveSessionPolicy } from '../domain/start.js';
import { enqueue, queueSize } from '../store/queue.js';
import { statusAfterFailedLaunch, statusOnSessionStart } from '../domain/transitions.js';
import {
  activeSessionsOfTask,
  attachExecution,
  getSession,
  hasPrimarySession,
  insertSession,
  lockSession,
  sessionByLaunchKey,
  sessionWithTurns,
  setQueuePaused,
} from '../store/sessions.js';
import { activeHoldOfTask } from '../store/holds.js';
import { getTask, lockTask } from '../store/tasks.js';
import { insertTurn } from '../store/turns.js';
import { toSession, type SessionRow, type TaskRow } from '../store/rows.js';
import { getKey, insertAnsweredKey, type IdempotencyRef } from '../store/idempotency.js';
import { assertKnownAgent } from './agents.js';
import { requestHash } from './idempotency.js';
import { drainQueue, emitQueueChanged } from './message.js';
import type { Sql, Tx } from '@kandev/runtime';
import { changeSessionState, changeTaskStatus } from './changes.js';
import { transact, type CallContext, type Emit, type OrchRuntime } from './context.js';
import { recordTranscript } from './transcript.js';
import { assertLiveSessionRoom } from './limits.js';

export interface StartedSession {
  session: SessionRow;
  turn_id: string | null;
  /** An Idempotency-Key retry: the session the first start made; nothing was launched. */
  replayed?: true;
  /** A start of the task was already in flight (or, by the path's policy, a session live): this one joined it and launched nothing. */
  joined?: true;
  /** The prompt waits in the task's queue (`keep_prompt`): the joined session, or the task's first session after its hold, delivers it. */
  queued?: QueuedMessage;
}

/** A `keep_prompt` start of a paused member: nothing started, the prompt waits in the task's queue. */
export interface QueuedPrompt {
  session: null;
  turn_id: null;
  queued: QueuedMessage;
}

export interface StartOptions {
  actor: Actor;
  task_id: string;
  agent?: string | undefined;
  prompt?: string | undefined;
  sender_task_id?: string | null;
  launch_key?: string;
  /** B-7: the caller's Idempotency-Key; a retry with it answers the session the first start made and launches nothing. */
  idempotency_key?: string | undefined;
  /** What this path does when the task already has a live session (domain/start.ts); default `another`. */
  live_session?: LiveSessionPolicy;
  /**
   * The prompt is a message that must not be lost (message_task_kandev): when the start is joined,
   * or the task is held by a pause, it is stored in the task's queue in the same transaction, under
   * the task's row lock, instead of being dropped (joined) or refused (paused).
   */
  keep_prompt?: boolean;
}

/** The session a start with this key already made, or null (a first start); the same key with another body is CONFLICT. */
async function replayedStart(tx: Tx | Sql, key: IdempotencyRef, hash: string): Promise<SessionRow | null> {
  const existing = await getKey(tx, key);
  if (!existing) return null;
  if (existing.request_hash !== hash) throw conflict('Idempotency-Key was already used for a different request', { idempotency_key: key.key });
  const sessionId = (existing.result as { session_id?: string } | null)?.session_id;
  return sessionId ? getSession(tx, sessionId) : null;
}

/**
 * Start a session: the only way one is made. Every path calls this (operator start, wakeup
 * dispatch, a message to a child with no session, create_task_kandev, spawn_session_kandev with
 * `live_session: 'refuse'`), and under the task's row lock it asks the one start rule
 * (domain/start.ts, ADR 0060): refused (archived, held, CANCELLED: CONFLICT with `details.reason`),
 * joined (a start in flight, or a live session by the path's policy: nothing launched), or started:
 * record it (STARTING) and move the task to IN_PROGRESS, capturing the launch fence epoch; then
 * launch. The lifecycle service asks us to admit the execution when it registers
 * (orch.execution.admit), which refuses it if a stop bumped the fence meanwhile (B-1).
 */
export async function startSession(rt: OrchRuntime, call: CallContext, opts: StartOptions & { keep_prompt: true }): Promise<StartedSession | QueuedPrompt>;
export async function startSession(rt: OrchRuntime, call: CallContext, opts: StartOptions): Promise<StartedSession>;
export async function startSession(rt: OrchRuntime, call: CallContext, opts: StartOptions): Promise<StartedSession | QueuedPrompt> {
  const turnId = opts.prompt ? randomUUID() : null;
  // ADR 0026: launch admission, asked of lifecycle before any write. A lifecycle queue that predicts
  // too long a wait refuses with retry_after_s; nothing is written then: no STARTING session, no
  // status change. Admitted, the answering instance holds a place for this execution id. Asked only
  // by a start the rule lets launch, under the task's row lock (ADR 0060): asked before the lock, a
  // burst of starts of one task reserved a place each (20 wakeups: 20 places) and lifecycle refused
  // the burst as busy, though all but one of them join and launch nothing. The lock is held for
  // that one round trip; starts of one task are serialised by it anyway.
  const executionId = randomUUID();
  const admit = () => request(rt.nc, Life.reserveLaunch, { execution_id: executionId }, { requestId: call.requestId });
  // Validation before effects: everything checkable is checked before the first write.
  const [before, heldBefore] = await Promise.all([getTask(rt.sql, opts.task_id), activeHoldOfTask(rt.sql, opts.task_id)]);
  if (!before) throw notFound('task not found');
  // The start rule on unlocked reads: a refusal here is final (the locked check below decides the
  // rest), except a pause for a keep_prompt start, which stores its prompt under the lock.
  const early = earlyRefusal({ task: before, hold: heldBefore });
  if (early && !(opts.keep_prompt && opts.prompt && early.reason === StartRefusals.paused)) throw refusalError(early);
  const agent = opts.agent ?? before.agent ?? rt.env.DEFAULT_AGENT; // a task's agent never changes
  await assertKnownAgent(rt, call, agent);
  const context = await contextFor(rt.sql, opts.sender_task_id);
  const startKey: IdempotencyRef | null = opts.idempotency_key
    ? { scope: `task:${opts.task_id}`, operation: 'orch.session.start', key: opts.idempotency_key }
    : null;
  // What makes a retry the same request: the body's own fields (the agent as named, not as defaulted).
  const startHash = requestHash({ agent: opts.agent ?? null, prompt: opts.prompt ?? null });
  // A retry of a start that happened answers at once, without asking for launch capacity it will not use.
  if (startKey) {
    const earlier = await replayedStart(rt.sql, startKey, startHash);
    if (earlier) return { session: earlier, turn_id: null, replayed: true };
  }
  if (opts.launch_key) {
    const earlier = await sessionByLaunchKey(rt.sql, opts.launch_key);
    if (earlier) return { session: earlier, turn_id: null };
  }
  const decided = await transact(rt, async (tx, emit) => {
    const locked = await lockTask(tx, opts.task_id);
    if (!locked) throw notFound('task not found');
    if (opts.launch_key) {
      const earlier = await sessionByLaunchKey(tx, opts.launch_key);
      if (earlier) return { kind: 'answered', answer: { session: earlier, turn_id: null } } as const;
    }
    // B-7: read under the task's row lock, which the first start held until its session and key
    // were committed together: a concurrent retry waits here and then finds them.
    if (startKey) {
      const earlier = await replayedStart(tx, startKey, startHash);
      if (earlier) return { kind: 'answered', answer: { session: earlier, turn_id: null, replayed: true } } as const;
    }
    // The one start rule (domain/start.ts), under the task's row lock, which every start, stop and
    // hold of the task takes first: B-1 (no launch escapes a hold), R-10.1 (none for a CANCELLED
    // task) and coalescing (a start in flight is joined: its STARTING session, committed under this
    // same lock, is visible to every start that gets the lock after it).
    const [hold, live] = await Promise.all([activeHoldOfTask(tx, locked.id), activeSessionsOfTask(tx, locked.id)]);
    const verdict = sessionStartVerdict({ task: locked, hold, live }, opts.live_session ?? 'another');
    if (verdict.kind === 'refuse') {
      if (opts.keep_prompt && opts.prompt && verdict.reason === StartRefusals.paused)
        return { kind: 'answered', answer: { session: null, turn_id: null, queued: await keepPrompt(rt, tx, emit, locked, null, opts) } } as const;
      throw refusalError(verdict);
    }
    if (verdict.kind === 'join') {
      const queued = opts.keep_prompt && opts.prompt ? await keepPrompt(rt, tx, emit, locked, verdict.session.id, opts) : undefined;
      if (!queued) await auditJoin(tx, locked, verdict.session, opts, call.requestId);
      return { kind: 'answered', answer: { session: verdict.session, turn_id: null, joined: true, ...(queued ? { queued } : {}) } } as const;
    }
    await admit();
    const primary = !(await hasPrimarySession(tx, locked.id));
    const session = await insertSession(tx, { task_id: locked.id, agent, state: 'STARTING', is_primary: primary, launch_key: opts.launch_key ?? null });
    if (startKey) await insertAnsweredKey(tx, startKey, startHash, { session_id: session.id });
    await emit(
      'session.state_changed',
      { workspace_id: locked.workspace_id, task_id: locked.id, session_id: session.id, actor: opts.actor },
      { session: toSession(session), from: null, to: 'STARTING', reason: 'session_started' },
    );
    if (turnId) {
      await insertTurn(tx, { id: turnId, session_id: session.id, execution_id: null, prompt: opts.prompt!, sender_task_id: opts.sender_task_id ?? null });
      await recordTranscript(
        rt,
        tx,
        emit,
        { workspace_id: locked.workspace_id, task_id: locked.id, session_id: session.id, actor: opts.actor },
        promptItem(turnId, opts.prompt!, opts.sender_task_id ?? null),
      );
    }
    await recordAudit(tx, {
      task_id: locked.id,
      workspace_id: locked.workspace_id,
      action: 'session.start',
      actor: actorLabel(opts.actor),
      reason: null,
      request_id: call.requestId,
      outcome: 'started',
      details: {
        session_id: session.id,
        agent,
        ...(opts.launch_key ? { wakeup_id: opts.launch_key } : {}),
        ...(opts.sender_task_id ? { sender_task_id: opts.sender_task_id } : {}),
      },
    });
    const next = statusOnSessionStart(locked.status);
    const task = next ? await changeTaskStatus(tx, emit, locked, next, { actor: opts.actor, reason: 'session_started' }) : locked;
    // the workspace's live sessions, counted last (with this one) under a lock held to commit.
    await assertLiveSessionRoom(rt, tx, locked.workspace_id);
    return { kind: 'launch', task, session, epoch: locked.fence_epoch, previousStatus: next ? locked.status : null } as const;
  });
  if (decided.kind === 'answered') return decided.answer;
  const { task, session, epoch, previousStatus } = decided;
  // Committed: a session now exists that is launching (its failure, if any, is counted apart).
  product.sessionStarted(session.agent!);
  const log = rt.log.child({ task_id: task.id, session_id: session.id, request_id: call.requestId });
  try {
    const execution = await request(
      rt.nc,
      Life.launch,
      {
        execution_id: executionId,
        task_id: task.id,
        session_id: session.id,
        workspace_id: task.workspace_id,
        agent: session.agent!,
        fence_epoch: epoch,
        mcp_mode: task.office ? 'office' : 'task',
        // the task's own directory; lifecycle resolves the default and checks this again.
        ...(task.working_dir ? { working_dir: task.working_dir } : {}),
        ...(opts.prompt && turnId ? { prompt: opts.prompt, turn_id: turnId, ...(context ? { context } : {}) } : {}),
      },
      // Waits what remains of the caller's deadline; lifecycle bounds the launch itself (its LAUNCH_TIMEOUT_MS).
      { requestId: call.requestId },
    );
    log.info({ execution_id: execution.execution_id, pid: execution.pid }, 'execution launched');
    const updated = await transact(rt, async (tx, emit) => {
      const s = (await lockSession(tx, session.id))!;
      // Admission recorded the execution; make sure the owner instance is known too (commands are routed to it).
      if (s.execution_id === execution.execution_id && s.instance_id !== execution.instance_id)
        await attachExecution(tx, s.id, execution.execution_id, execution.instance_id);
      if (s.state !== 'STARTING') return s; // a stop or a fast first turn got there first
      const ready = await changeSessionState(tx, emit, task, s, turnId ? 'RUNNING' : 'WAITING_FOR_INPUT', { reason: 'execution_ready' });
      // Started without a prompt: what the task's queue holds (left by an earlier session, R-1.6)
      // goes first. With a prompt it goes after that first turn (the turn end drains it).
      if (turnId || !ready.execution_id || !ready.instance_id) return ready;
      const delivered = await drainQueue(rt, call, tx, emit, task, ready);
      return delivered ? ((await getSession(tx, s.id)) ?? ready) : ready;
    });
    return { session: updated, turn_id: turnId };
  } catch (e) {
    log.warn({ err: e }, 'launch failed');
    await failStartingSession(rt, task, session.id, isKandevError(e) ? e.message.slice(0, 500) : 'launch failed', previousStatus, opts.actor).then(
      (failed) => failed && product.sessionFailed(session.agent, 'launch_failed'),
      (err) => log.error({ err }, 'could not record the failed launch; the reconciler will repair the task'),
    );
    throw e;
  }
}

/** A joined start launched nothing; the control is still recorded (B-3), with the session it joined. */
async function auditJoin(tx: Tx, task: TaskRow, joined: SessionRow, opts: StartOptions, requestId: string) {
  await recordAudit(tx, {
    task_id: task.id,
    workspace_id: task.workspace_id,
    action: 'session.start',
    actor: actorLabel(opts.actor),
    reason: null,
    request_id: requestId,
    outcome: 'joined',
    details: { session_id: joined.id, ...(opts.launch_key ? { wakeup_id: opts.launch_key } : {}) },
  });
}

/** A keep_prompt start that starts nothing: the prompt joins the task's queue (R-1.8 FIFO, bounded; ). */
async function keepPrompt(rt: OrchRuntime, tx: Tx, emit: Emit, task: TaskRow, sessionId: string | null, opts: StartOptions): Promise<QueuedMessage> {
  assertQueueHasRoom(await queueSize(tx, task.id), rt.env.QUEUE_LIMIT);
  const m = await enqueue(tx, {
    task_id: task.id,
    session_id: sessionId,
    prompt: opts.prompt!,
    sender_task_id: opts.sender_task_id ?? null,
    queued_by: actorLabel(opts.actor),
  });
  await emitQueueChanged(tx, emit, task, sessionId);
  return m;
}

/**
 * A launch that failed: its session becomes FAILED and the task goes back to the status it had
 * before this start moved it to IN_PROGRESS, unless something else has happened since (another
 * active session, a stop, an operator move).
 */
async function failStartingSession(
  rt: OrchRuntime,
  task: TaskRow,
  sessionId: string,
  message: string,
  previousStatus: TaskStatus | null,
  actor: Actor,
): Promise<boolean> {
  return transact(rt, async (tx, emit) => {
    const locked = await lockTask(tx, task.id);
    const s = (await lockSession(tx, sessionId))!;
    if (s.state !== 'STARTING') return false;
    await changeSessionState(tx, emit, task, s, 'FAILED', { error_message: message, reason: 'launch_failed' });
    if (!locked || !previousStatus) return true;
    const others = (await activeSessionsOfTask(tx, task.id)).filter((o) => o.id !== s.id);
    const revert = statusAfterFailedLaunch(locked.status, previousStatus, others.length);
    if (revert) await changeTaskStatus(tx, emit, locked, revert, { actor, reason: 'launch_failed' });
    return true;
  });
}

export async function sessionDetail(rt: OrchRuntime, actor: Actor, sessionId: string) {
  const found = await sessionWithTurns(rt.sql, sessionId);
  if (!found) throw notFound('session not found');
  const { session, turns } = found;
  assertCanAccess(actor, { id: session.task_id, workspace_id: found.workspace_id }, 'session');
  // From the registry bucket, as stops read it (ADR 0011), not through the owner lifecycle instance: a read
  // must not queue behind an instance busy tearing down a hundred agents (the console polls this during a tree
  // pause). The entry is what lifecycle last put, which is what any other lifecycle instance would answer.
  const execution = session.execution_id
    ? await rt.registry.get(session.execution_id, session.task_id).catch((e: unknown) => {
        rt.log.warn({ err: e, session_id: sessionId }, 'registry unreachable; the session is read without its execution');
        return null;
      })
    : null;
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
export async function promptSession(rt: OrchRuntime, call: CallContext, actor: Actor, sessionId: string, prompt: string, idempotencyKey?: string) {
  const session = await getSession(rt.sql, sessionId);
  if (!session) throw notFound('session not found');
  const task = assertCanAccess(actor, await getTask(rt.sql, session.task_id), 'session');
  const key: IdempotencyRef | null = idempotencyKey ? { scope: `session:${sessionId}`, operation: 'orch.session.prompt', key: idempotencyKey } : null;
  const hash = requestHash({ prompt });
  return transact(rt, async (tx, emit): Promise<{ turn_id: string; replayed?: true }> => {
    const s = (await lockSession(tx, sessionId))!;
    // B-5: a retried prompt (same Idempotency-Key) answers the first one's turn and starts none.
    // Read under the session's guard, which the first held until its turn and key were committed together.
    if (key) {
      const existing = await getKey(tx, key);
      if (existing && existing.request_hash !== hash) throw conflict('Idempotency-Key was already used for a different request', { idempotency_key: key.key });
      if (existing) return { turn_id: (existing.result as { turn_id: string }).turn_id, replayed: true };
    }
    if (!s.execution_id || !s.instance_id || !sessionIsIdle(s.state)) {
      throw conflict(s.state === 'RUNNING' ? 'a turn is already in flight' : `session is ${s.state}; agent not running`, { state: s.state });
    }
    const turn = await dispatchTurn(rt, call, tx, emit, task, s, prompt, null);
    await Promise.all([
      setQueuePaused(tx, s.id, false),
      recordAudit(tx, {
        task_id: task.id,
        workspace_id: task.workspace_id,
        action: 'session.prompt',
        actor: actorLabel(actor),
        reason: null,
        request_id: call.requestId,
        outcome: 'sent',
        details: { session_id: s.id, turn_id: turn },
      }),
      key ? insertAnsweredKey(tx, key, hash, { turn_id: turn }) : null,
    ]);
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
  await recordTranscript(rt, tx, emit, { workspace_id: task.workspace_id, task_id: task.id, session_id: s.id }, promptItem(turn.id, prompt, senderTaskId));
  await changeSessionState(tx, emit, task, s, 'RUNNING', { reason: 'turn_started' });
  const context = await contextFor(tx, senderTaskId);
  await request(
    rt.nc,
    Life.prompt.at(s.instance_id!),
    { execution_id: s.execution_id!, turn_id: turn.id, prompt, ...(context ? { context } : {}) },
    { requestId: call.requestId, timeoutMs: rt.env.LIFECYCLE_PROMPT_WAIT_MS },
  );
  return turn.id;
}

/** Sender attribution for a message from another task, or nothing for an operator's prompt. */
async function contextFor(q: Parameters<typeof getTask>[0], senderTaskId: string | null | undefined): Promise<string | undefined> {
  if (!senderTaskId) return undefined;
  const sender = await getTask(q, senderTaskId);
  return sender ? senderContext(sender) : undefined;
}

/** A turn's prompt as a transcript item: the operator's, or another task's message (its sender in meta). */
const promptItem = (turnId: string, prompt: string, senderTaskId: string | null) =>
  ({ turn_id: turnId, role: 'user', kind: 'prompt', text: prompt, meta: senderTaskId ? { sender_task_id: senderTaskId } : {} }) as const;
