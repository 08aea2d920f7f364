import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventSubject, Orch, type EventEnvelope } from '@kandev/contracts';
import { EventPublisher, request } from '@kandev/runtime';
import { eventually } from '@kandev/testkit';
import { LIFECYCLE_CANCEL_WAIT_MS, operator, startHarness, type Harness } from './harness.js';

/** R-3 at the orchestrator: the guard, the error cases, and R-3.5 (queue waits after a user cancel). */
describe('orch.agent.cancel', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => h?.stop());
  const cancel = (session_id: string) => request(h.nc, Orch.agentCancel, { actor: operator, session_id });

  it('cancels the captured turn; the session waits for input', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'sleep');
    expect(await cancel(s.id)).toEqual({ success: true, session_id: s.id });
    const detail = await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id });
    expect(detail.state).toBe('WAITING_FOR_INPUT');
    expect(detail.turns[0]!.stop_reason).toBe('cancelled');
    expect(h.life.cancels.at(-1)!.turn_id).toBe(detail.turns[0]!.id);
  });

  it('stages an event that carries exactly the session row the cancel wrote', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'sleep');
    await cancel(s.id);
    const { turns: _turns, execution: _execution, ...session } = await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id });
    const [event] = await h.sql<{ payload: { data: Record<string, unknown> } }[]>`
      SELECT payload FROM orchestrator.outbox WHERE payload->>'type' = 'session.state_changed' AND payload->>'session_id' = ${s.id} AND payload->'data'->>'reason' = 'turn_cancelled'`;
    expect(event!.payload.data).toEqual({ from: 'RUNNING', to: 'WAITING_FOR_INPUT', reason: 'turn_cancelled', session });
  });

  /**
   * Every session.agent.cancelled of a session, with the session's state and its turns' stop reasons
   * read from the database the moment the event arrived (what a WebSocket client reading the session
   * on that event would find).
   */
  function watchAgentCancelled(sessionId: string) {
    const seen: Array<{ data: unknown; state: string; stopReasons: Array<string | null> }> = [];
    const sub = h.nc.subscribe(eventSubject('session.agent.cancelled'));
    void (async () => {
      for await (const m of sub) {
        const ev = JSON.parse(new TextDecoder().decode(m.data)) as EventEnvelope<'session.agent.cancelled'>;
        if (ev.session_id !== sessionId) continue;
        const [row] = await h.sql<{ state: string }[]>`SELECT state FROM orchestrator.sessions WHERE id = ${sessionId}`;
        const turns = await h.sql<
          { stop_reason: string | null }[]
        >`SELECT stop_reason FROM orchestrator.turns WHERE session_id = ${sessionId} ORDER BY started_at`;
        seen.push({ data: ev.data, state: row!.state, stopReasons: turns.map((t) => t.stop_reason) });
      }
    })();
    return { seen, stop: () => sub.unsubscribe() };
  }

  it('publishes session.agent.cancelled once the cancel is committed: a reader on that event finds the turn closed and the session waiting (R-3.3)', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'sleep');
    const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
    const turn = e.turn_id!;
    const watch = watchAgentCancelled(s.id);
    try {
      await cancel(s.id);
      await eventually(async () => watch.seen.length > 0);
      expect(watch.seen).toEqual([
        { data: { execution_id: e.execution_id, turn_id: turn, stop_reason: 'cancelled' }, state: 'WAITING_FOR_INPUT', stopReasons: ['cancelled'] },
      ]);
      // The lifecycle's own report of the turn's end, later: the turn is closed already, no second event.
      const pub = new EventPublisher(h.nc);
      const late = await pub.emit(
        'turn.completed',
        { workspace_id: ws.id, task_id: task.id, session_id: s.id },
        { execution_id: e.execution_id, turn_id: turn, stop_reason: 'cancelled' },
      );
      await eventually(async () => (await h.sql`SELECT 1 FROM orchestrator.inbox WHERE event_id = ${late.id}`).length > 0);
      await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id }); // one more round trip for a stray event to arrive
      expect(watch.seen).toHaveLength(1);
    } finally {
      watch.stop();
    }
  });

  it('publishes session.agent.cancelled for a turn the agent runtime cancelled on its own, with the writes that close it', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'sleep');
    const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
    const watch = watchAgentCancelled(s.id);
    try {
      await new EventPublisher(h.nc).emit(
        'turn.completed',
        { workspace_id: ws.id, task_id: task.id, session_id: s.id },
        { execution_id: e.execution_id, turn_id: e.turn_id!, stop_reason: 'cancelled' },
      );
      await eventually(async () => watch.seen.length > 0);
      expect(watch.seen).toEqual([
        { data: { execution_id: e.execution_id, turn_id: e.turn_id, stop_reason: 'cancelled' }, state: 'WAITING_FOR_INPUT', stopReasons: ['cancelled'] },
      ]);
    } finally {
      watch.stop();
    }
  });

  it('is a successful no-op without an active turn', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id);
    const before = await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id });
    expect(await cancel(s.id)).toEqual({ success: true, session_id: s.id });
    expect(await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id })).toEqual(before);
  });

  it('answers NOT_FOUND for an unknown session and "agent not running" for a finished one', async () => {
    await expect(cancel('00000000-0000-4000-8000-00000000beef')).rejects.toMatchObject({ code: 'NOT_FOUND' });
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'x');
    await request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id });
    await expect(cancel(s.id)).rejects.toMatchObject({ code: 'CONFLICT', message: 'agent not running' });
  });

  it('R-10.5: an unacknowledged cancel answers the escalation (CONFLICT, the agent is being torn down) and is recorded as a stop, not a crash', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'x');
    h.life.cancelBehaviour = 'timeout';
    try {
      await expect(cancel(s.id)).rejects.toMatchObject({
        code: 'CONFLICT',
        message: expect.stringContaining('being torn down'),
        details: { escalation: 'teardown', reason: 'cancel_unacknowledged', session_id: s.id, session_state: 'CANCELLED', grace_ms: 500 },
      });
    } finally {
      h.life.cancelBehaviour = 'cancel';
    }
    // The stop pipeline's writes: CANCELLED with its fixed reason, the turn closed cancelled, and the
    // task through R-1.4's guarded REVIEW (it was IN_PROGRESS, no other session working).
    const [row] = await h.sql<{ state: string; cancel_reason: string | null; error_message: string | null }[]>`
      SELECT state, cancel_reason, error_message FROM orchestrator.sessions WHERE id = ${s.id}`;
    expect(row).toEqual({ state: 'CANCELLED', cancel_reason: 'cancel_unacknowledged', error_message: null });
    const detail = await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id });
    expect(detail.turns.at(-1)!.stop_reason).toBe('cancelled');
    // Stamped when the escalation was decided (not at the transaction's start), the turn with it:
    // the invariant checker reads the stop's turn as the one that ends with its session.
    const [stamps] = await h.sql<{ same: boolean; fresh: boolean }[]>`
      SELECT t.completed_at = s.completed_at AS same, s.completed_at > s.started_at AS fresh
      FROM orchestrator.sessions s JOIN orchestrator.turns t ON t.session_id = s.id WHERE s.id = ${s.id} ORDER BY t.started_at DESC LIMIT 1`;
    expect(stamps).toEqual({ same: true, fresh: true });
    const t = await request(h.nc, Orch.taskGet, { actor: operator, task_id: task.id });
    expect(t.status).toBe('REVIEW');
    const [audit] = await h.sql<{ outcome: string; details: Record<string, unknown> }[]>`
      SELECT outcome, details FROM orchestrator.audit_log WHERE task_id = ${task.id} AND action = 'agent.cancel'`;
    expect(audit).toMatchObject({ outcome: 'escalated', details: { session_id: s.id, escalation: 'teardown' } });
    // The execution's end, when it comes, finds the session already CANCELLED: no crash path.
    const [ev] = await h.sql<{ payload: { data: Record<string, unknown> } }[]>`
      SELECT payload FROM orchestrator.outbox WHERE payload->>'type' = 'session.state_changed' AND payload->>'session_id' = ${s.id} AND payload->'data'->>'to' = 'CANCELLED'`;
    expect(ev!.payload.data).toMatchObject({ from: 'RUNNING', reason: 'cancel_unacknowledged' });
  });

  it("an owner that never answers (died mid-cancel) holds the session for LIFECYCLE_CANCEL_WAIT_MS, not the caller's deadline", async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'x');
    h.life.cancelBehaviour = 'hang';
    try {
      const t0 = performance.now();
      await expect(request(h.nc, Orch.agentCancel, { actor: operator, session_id: s.id }, { timeoutMs: 30_000 })).rejects.toMatchObject({
        code: 'UNAVAILABLE',
      });
      const waited = performance.now() - t0;
      expect(waited).toBeGreaterThanOrEqual(LIFECYCLE_CANCEL_WAIT_MS - 50);
      expect(waited).toBeLessThan(LIFECYCLE_CANCEL_WAIT_MS + 5_000);
      // The guard is free again: a stop goes through at once.
      expect((await request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id })).status).toBe('stopped');
    } finally {
      h.life.cancelBehaviour = 'cancel';
      h.life.releaseHung();
    }
  }, 40_000);

  it('does not run queued messages after a user cancel until the operator prompts again', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const s = await h.startSession(child.id, 'working');
    const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
    const turn = e.turn_id!;
    const scope = { workspace_id: ws.id, task_id: child.id, session_id: s.id };
    const pub = new EventPublisher(h.nc);
    /** Wait until the orchestrator applied (or skipped) the event: its id is in the inbox. */
    const applied = async (id: string) => {
      for (const end = Date.now() + 10_000; Date.now() < end; await new Promise((r) => setTimeout(r, 25))) {
        if ((await h.sql`SELECT 1 FROM orchestrator.inbox WHERE event_id = ${id}`).length) return;
      }
      throw new Error(`event ${id} not applied within 10 s`);
    };
    const queue = () => request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id });
    const promptsTo = () => h.life.prompts.filter((p) => p.execution_id === e.execution_id).map((p) => p.prompt);

    await h.message(parent.id, child.id, 'next job');
    await cancel(s.id);
    // The lifecycle's own report of the cancelled turn arrives afterwards: no drain.
    await applied((await pub.emit('turn.completed', scope, { execution_id: e.execution_id, turn_id: turn, stop_reason: 'cancelled' })).id);
    // A queued message arriving now waits as well.
    expect(await h.message(parent.id, child.id, 'another job')).toMatchObject({ status: 'queued' });
    // The parent's explicit interrupt runs; when its turn ends the queue still waits (the drain
    // after a turn end is what the pause holds back).
    expect(await h.message(parent.id, child.id, 'urgent', 'interrupt')).toMatchObject({ status: 'sent' });
    const urgent = h.life.prompts.at(-1)!;
    expect(urgent.prompt).toBe('urgent');
    e.status = 'READY';
    e.turn_id = null;
    await applied((await pub.emit('turn.completed', scope, { execution_id: e.execution_id, turn_id: urgent.turn_id, stop_reason: 'end_turn' })).id);
    expect((await queue()).map((m) => m.prompt)).toEqual(['next job', 'another job']);
    expect(promptsTo()).toEqual(['working', 'urgent']);

    // The operator resumes by prompting: the queue drains, oldest first, after that turn.
    const { turn_id } = await request(h.nc, Orch.sessionPrompt, { actor: operator, session_id: s.id, prompt: 'carry on' });
    e.status = 'READY';
    e.turn_id = null;
    await applied((await pub.emit('turn.completed', scope, { execution_id: e.execution_id, turn_id, stop_reason: 'end_turn' })).id);
    expect(promptsTo()).toEqual(['working', 'urgent', 'carry on', 'next job']);
  });
});
