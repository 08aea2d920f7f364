import { randomUUID } from 'node:crypto';
import { actorLabel, conflict, isKandevError, Life, notFound, type Actor, type QueuedMessage, type TaskStatus } from '@kandev/contracts';
import { product, request, type Sql, type Tx } from '@kandev/runtime';
import { assertQueueHasRoom } from '../domain/messages.js';
import { earlyRefusal, refusalError, sessionStartVerdict, StartRefusals, type LiveSessionPolicy } from '../domain/start.js';
import { statusAfterFailedLaunch, statusOnSessionStart } from '../domain/transitions.js';
import { recordAudit } from '../store/audit.js';
import { activeHoldOfTask } from '../store/holds.js';
import { getKey, insertAnsweredKey, type IdempotencyRef } from '../store/idempotency.js';
import { enqueue, queueSize } from '../store/queue.js';
import { toSession, type SessionRow, type TaskRow } from '../store/rows.js';
import { activeSessionsOfTask, attachExecution, getSession, hasPrimarySession, insertSession, lockSession, sessionByLaunchKey } from '../store/sessions.js';
import { getTask, lockTask } from '../store/tasks.js';
import { insertTurn } from '../store/turns.js';
import { assertKnownAgent } from './agents.js';
import { changeSessionState, changeTaskStatus } from './changes.js';
import { transact, type CallContext, type Emit, type OrchRuntime } from './context.js';
import { requestHash } from './idempotency.js';
import { assertLiveSessionRoom } from './limits.js';
import { drainQueue, emitQueueChanged } from './message.js';
import { contextFor, promptItem } from './sessions.js';
import { recordTranscript } from './transcript.js';

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

/** What a start checked and chose before taking any lock (nothing written yet). */
interface PreparedStart {
  /** The execution this start launches, named before the launch so lifecycle can reserve its place. */
  executionId: string;
  /** The first turn's id, when the start carries a prompt. */
  turnId: string | null;
  agent: string;
  /** Sender attribution of a message from another task. */
  context: string | undefined;
  startKey: IdempotencyRef | null;
  startHash: string;
}

/** What the start's transaction decided: an answer with nothing to launch, or a session to launch. */
type StartDecision =
  | { kind: 'answered'; answer: StartedSession | QueuedPrompt }
  | { kind: 'launch'; task: TaskRow; session: SessionRow; epoch: number; previousStatus: TaskStatus | null };

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
  const prepared = await prepareStart(rt, call, opts);
  if ('answer' in prepared) return prepared.answer;
  const decided = await transact(rt, (tx, emit) => decideStart(rt, call, tx, emit, opts, prepared));
  if (decided.kind === 'answered') return decided.answer;
  return launchStarted(rt, call, opts, prepared, decided);
}

/**
 * Validation before effects: everything checkable is checked before the first write, on unlocked
 * reads. A refusal here is final (the locked check decides the rest), except a pause for a
 * keep_prompt start, which stores its prompt under the lock; a retry of a start that happened
 * answers at once, without asking for launch capacity it will not use.
 */
async function prepareStart(rt: OrchRuntime, call: CallContext, opts: StartOptions): Promise<PreparedStart | { answer: StartedSession }> {
  const [before, heldBefore] = await Promise.all([getTask(rt.sql, opts.task_id), activeHoldOfTask(rt.sql, opts.task_id)]);
  if (!before) throw notFound('task not found');
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
  if (startKey) {
    const earlier = await replayedStart(rt.sql, startKey, startHash);
    if (earlier) return { answer: { session: earlier, turn_id: null, replayed: true } };
  }
  if (opts.launch_key) {
    const earlier = await sessionByLaunchKey(rt.sql, opts.launch_key);
    if (earlier) return { answer: { session: earlier, turn_id: null } };
  }
  return { executionId: randomUUID(), turnId: opts.prompt ? randomUUID() : null, agent, context, startKey, startHash };
}

/**
 * The start's transaction, under the task's row lock, which every start, stop and hold of the task
 * takes first: a keyed retry finds what the first start committed; then the one start rule
 * (domain/start.ts): B-1 (no launch escapes a hold), R-10.1 (none for a CANCELLED task) and
 * coalescing (a start in flight is joined: its STARTING session, committed under this same lock, is
 * visible to every start that gets the lock after it).
 */
async function decideStart(rt: OrchRuntime, call: CallContext, tx: Tx, emit: Emit, opts: StartOptions, prepared: PreparedStart): Promise<StartDecision> {
  const locked = await lockTask(tx, opts.task_id);
  if (!locked) throw notFound('task not found');
  if (opts.launch_key) {
    const earlier = await sessionByLaunchKey(tx, opts.launch_key);
    if (earlier) return { kind: 'answered', answer: { session: earlier, turn_id: null } };
  }
  // B-7: read under the task's row lock, which the first start held until its session and key
  // were committed together: a concurrent retry waits here and then finds them.
  if (prepared.startKey) {
    const earlier = await replayedStart(tx, prepared.startKey, prepared.startHash);
    if (earlier) return { kind: 'answered', answer: { session: earlier, turn_id: null, replayed: true } };
  }
  const [hold, live] = await Promise.all([activeHoldOfTask(tx, locked.id), activeSessionsOfTask(tx, locked.id)]);
  const verdict = sessionStartVerdict({ task: locked, hold, live }, opts.live_session ?? 'another');
  if (verdict.kind === 'refuse') {
    if (opts.keep_prompt && opts.prompt && verdict.reason === StartRefusals.paused)
      return { kind: 'answered', answer: { session: null, turn_id: null, queued: await keepPrompt(rt, tx, emit, locked, null, opts) } };
    throw refusalError(verdict);
  }
  if (verdict.kind === 'join') {
    const queued = opts.keep_prompt && opts.prompt ? await keepPrompt(rt, tx, emit, locked, verdict.session.id, opts) : undefined;
    if (!queued) await auditJoin(tx, locked, verdict.session, opts, call.requestId);
    return { kind: 'answered', answer: { session: verdict.session, turn_id: null, joined: true, ...(queued ? { queued } : {}) } };
  }
  // ADR 0026: launch admission, asked of lifecycle before any write. A lifecycle queue that predicts
  // too long a wait refuses with retry_after_s; nothing is written then: no STARTING session, no
  // status change. Admitted, the answering instance holds a place for this execution id. Asked only
  // by a start the rule lets launch, under the task's row lock (ADR 0060): asked before the lock, a
  // burst of starts of one task reserved a place each (20 wakeups: 20 places) and lifecycle refused
  // the burst as busy, though all but one of them join and launch nothing. The lock is held for
  // that one round trip; starts of one task are serialised by it anyway.
  await request(rt.nc, Life.reserveLaunch, { execution_id: prepared.executionId }, { requestId: call.requestId });
  return recordStart(rt, call, tx, emit, locked, opts, prepared);
}

/** A start the rule lets launch: the session (STARTING), its key, its first turn and transcript item, the audit row, the task to IN_PROGRESS. */
async function recordStart(
  rt: OrchRuntime,
  call: CallContext,
  tx: Tx,
  emit: Emit,
  locked: TaskRow,
  opts: StartOptions,
  { turnId, agent, startKey, startHash }: PreparedStart,
): Promise<StartDecision> {
  const scope = { workspace_id: locked.workspace_id, task_id: locked.id, actor: opts.actor };
  const primary = !(await hasPrimarySession(tx, locked.id));
  const session = await insertSession(tx, { task_id: locked.id, agent, state: 'STARTING', is_primary: primary, launch_key: opts.launch_key ?? null });
  if (startKey) await insertAnsweredKey(tx, startKey, startHash, { session_id: session.id });
  await emit(
    'session.state_changed',
    { ...scope, session_id: session.id },
    { session: toSession(session), from: null, to: 'STARTING', reason: 'session_started' },
  );
  if (turnId) {
    await insertTurn(tx, { id: turnId, session_id: session.id, execution_id: null, prompt: opts.prompt!, sender_task_id: opts.sender_task_id ?? null });
    await recordTranscript(rt, tx, emit, { ...scope, session_id: session.id }, promptItem(turnId, opts.prompt!, opts.sender_task_id ?? null));
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
  return { kind: 'launch', task, session, epoch: locked.fence_epoch, previousStatus: next ? locked.status : null };
}

/**
 * Committed: the launch. The lifecycle service asks us to admit the execution when it registers
 * (orch.execution.admit), which refuses it if a stop bumped the fence meanwhile (B-1); a launch
 * that fails leaves its session FAILED (failStartingSession).
 */
async function launchStarted(
  rt: OrchRuntime,
  call: CallContext,
  opts: StartOptions,
  { executionId, turnId, context }: PreparedStart,
  { task, session, epoch, previousStatus }: Extract<StartDecision, { kind: 'launch' }>,
): Promise<StartedSession> {
  // A session now exists that is launching (its failure, if any, is counted apart).
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
    return { session: await markLaunched(rt, call, task, session.id, execution, turnId), turn_id: turnId };
  } catch (e) {
    log.warn({ err: e }, 'launch failed');
    await failStartingSession(rt, task, session.id, isKandevError(e) ? e.message.slice(0, 500) : 'launch failed', previousStatus, opts.actor).then(
      (failed) => failed && product.sessionFailed(session.agent, 'launch_failed'),
      (err) => log.error({ err }, 'could not record the failed launch; the reconciler will repair the task'),
    );
    throw e;
  }
}

/** The launched session, under its guard: its owner recorded, RUNNING (a first turn) or WAITING_FOR_INPUT, and what the task's queue holds delivered. */
async function markLaunched(
  rt: OrchRuntime,
  call: CallContext,
  task: TaskRow,
  sessionId: string,
  execution: { execution_id: string; instance_id: string },
  turnId: string | null,
): Promise<SessionRow> {
  return transact(rt, async (tx, emit) => {
    const s = (await lockSession(tx, sessionId))!;
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
