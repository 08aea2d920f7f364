import { actorLabel, conflict, Life, notFound, type Actor } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import { senderContext, sessionIsIdle } from '../domain/messages.js';
import { recordAudit } from '../store/audit.js';
import { getKey, insertAnsweredKey, type IdempotencyRef } from '../store/idempotency.js';
import { toSession, type SessionRow } from '../store/rows.js';
import { getSession, lockSession, sessionWithTurns, setQueuePaused } from '../store/sessions.js';
import { getTask } from '../store/tasks.js';
import { insertTurn } from '../store/turns.js';
import { changeSessionState } from './changes.js';
import { transact, type CallContext, type OrchRuntime } from './context.js';
import { requestHash } from './idempotency.js';
import { recordTranscript } from './transcript.js';

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
export async function contextFor(q: Parameters<typeof getTask>[0], senderTaskId: string | null | undefined): Promise<string | undefined> {
  if (!senderTaskId) return undefined;
  const sender = await getTask(q, senderTaskId);
  return sender ? senderContext(sender) : undefined;
}

/** A turn's prompt as a transcript item: the operator's, or another task's message (its sender in meta). */
export const promptItem = (turnId: string, prompt: string, senderTaskId: string | null) =>
  ({ turn_id: turnId, role: 'user', kind: 'prompt', text: prompt, meta: senderTaskId ? { sender_task_id: senderTaskId } : {} }) as const;
