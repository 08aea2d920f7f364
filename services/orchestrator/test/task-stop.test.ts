import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Orch, type Execution } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { eventually } from '@kandev/testkit';
import { operator, startHarness, type Harness } from './harness.js';

/** the operator's task stop reaches every live process, orphans included. */
describe('orch.task.stop', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => h?.stop());
  const stop = (task_id: string, actor = operator) => request(h.nc, Orch.taskStop, { actor, task_id });

  it('halts an orphaned execution and keeps its session FAILED with its error message', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'orphan');
    const s = await h.startSession(task.id, 'work');
    await h.sql`UPDATE orchestrator.sessions SET state = 'FAILED', error_message = 'agent never started', completed_at = now() WHERE id = ${s.id}`;
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    const res = await stop(task.id);
    expect(res).toEqual({ task_id: task.id, status: 'stopped', executions: [{ session_id: s.id, execution_id: exec.execution_id, orphaned: true }] });
    expect(h.life.stops.at(-1)).toMatchObject({ execution_id: exec.execution_id, orphaned: true });
    const t = await h.getTask(task.id);
    expect(t.sessions[0]).toMatchObject({ state: 'FAILED', error_message: 'agent never started' });
  });

  it('cancels an active session through the normal transition and reports its execution', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'active');
    const s = await h.startSession(task.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    const res = await stop(task.id);
    expect(res.executions).toEqual([{ session_id: s.id, execution_id: exec.execution_id, orphaned: false }]);
    const t = await h.getTask(task.id);
    expect(t.sessions[0]!.state).toBe('CANCELLED');
    expect(t.status).toBe('REVIEW');
    const events = await h.sql`SELECT payload->>'type' AS type FROM orchestrator.outbox WHERE payload->>'session_id' = ${s.id} ORDER BY created_at`;
    expect(events.map((e) => e.type)).toContain('session.state_changed');
  });

  it('answers NOT_FOUND when nothing is active or registered, and changes nothing', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'idle');
    const before = await h.getTask(task.id);
    await expect(stop(task.id)).rejects.toMatchObject({ code: 'NOT_FOUND', message: 'execution not found' });
    expect(await h.getTask(task.id)).toEqual(before);
  });

  it('does not fail on a repeat after the executions are gone, and makes no duplicate transition', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'repeat');
    const s = await h.startSession(task.id, 'work');
    await stop(task.id);
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    await h.life.forget(exec.execution_id);
    const mid = await h.getTask(task.id);
    await expect(stop(task.id)).rejects.toMatchObject({ code: 'NOT_FOUND' });
    expect(await h.getTask(task.id)).toEqual(mid);
    const [n] = await h.sql`SELECT count(*)::int AS n FROM orchestrator.outbox WHERE payload->>'session_id' = ${s.id} AND payload->'data'->>'to' = 'CANCELLED'`;
    expect(n!.n).toBe(1);
  });

  it('refuses an operator whose token excludes the workspace, without leaking or stopping', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'private');
    await h.startSession(task.id, 'work');
    const stops = h.life.stops.length;
    await expect(stop(task.id, { type: 'operator', id: 'op-2', workspaces: ['00000000-0000-4000-8000-000000000000'] })).rejects.toMatchObject({
      code: 'FORBIDDEN',
    });
    expect(h.life.stops.length).toBe(stops);
  });

  it('answers INTERNAL_ERROR, never NOT_FOUND, when the registry cannot be read, and changes nothing', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'unreadable registry');
    await h.startSession(task.id, 'work');
    const before = await h.getTask(task.id);
    await h.life.failRegistry(true);
    try {
      await expect(stop(task.id)).rejects.toMatchObject({ code: 'INTERNAL_ERROR' });
    } finally {
      await h.life.failRegistry(false);
    }
    expect(await h.getTask(task.id)).toEqual(before);
    expect((await stop(task.id)).status).toBe('stopped');
  });

  it('takes its decision without the lifecycle: a stalled owner holds no lock, and the stop answers once the owner accepts', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'stalled owner');
    const s = await h.startSession(task.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    h.life.stalled = true;
    let answered = false;
    const pending = request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id }, { timeoutMs: 30_000 }).finally(() => (answered = true));
    try {
      // Committed while the owner is stalled: the session reads CANCELLED, and nothing holds its row or the task's.
      await eventually(async () => (await h.getTask(task.id)).sessions[0]!.state === 'CANCELLED', 10_000);
      const locked = await h.sql.begin(async (tx) => [
        ...(await tx`SELECT id FROM orchestrator.tasks WHERE id = ${task.id} FOR UPDATE NOWAIT`),
        ...(await tx`SELECT id FROM orchestrator.sessions WHERE id = ${s.id} FOR UPDATE NOWAIT`),
      ]);
      expect(locked).toHaveLength(2);
      // the answer reports what the owners accepted, so it waits for the stalled one.
      expect(answered).toBe(false);
    } finally {
      h.life.stalled = false;
      h.life.releaseHung();
    }
    expect(await pending).toEqual({
      task_id: task.id,
      status: 'stopped',
      executions: [{ session_id: s.id, execution_id: exec.execution_id, orphaned: false }],
    });
    expect(h.life.stops.at(-1)).toMatchObject({ execution_id: exec.execution_id, orphaned: false });
  });

  it("answers its own audited error, not the caller's timeout, when a stalled owner does not accept within the caller's deadline", async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'owner stalled past the deadline');
    await h.startSession(task.id, 'work');
    h.life.stalled = true;
    try {
      // The teardown request waits what is left of the 3 s less the reply's reserve (250 ms), so the
      // orchestrator's answer, written to the audit log first, still reaches the caller.
      const err = await request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id }, { timeoutMs: 3_000 }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'INTERNAL_ERROR', message: expect.stringContaining('teardown request was not accepted') });
      const audit = await h.sql`SELECT outcome FROM orchestrator.audit_log WHERE task_id = ${task.id} AND action = 'task.stop' ORDER BY created_at`;
      expect(audit.map((a) => a.outcome)).toEqual(['stopped', 'error:INTERNAL_ERROR']);
      expect((await h.getTask(task.id)).sessions[0]!.state).toBe('CANCELLED'); // decided and durable all the same
    } finally {
      h.life.stalled = false;
      h.life.releaseHung();
    }
  });

  it('lists the executions as UNAVAILABLE, not INTERNAL_ERROR, when no lifecycle answers in time (GET /tasks/:id/executions)', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'registry stalled');
    h.life.stalled = true;
    try {
      // The orchestrator's own listing request gives up before the caller does (ADR 0015), so this
      // is its answer: the lifecycle's timeout, kept as UNAVAILABLE (503, try again).
      const err = await request(h.nc, Orch.taskExecutions, { actor: operator, task_id: task.id }, { timeoutMs: 3_000 }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('life.exec.list') });
    } finally {
      h.life.stalled = false;
      h.life.releaseHung();
    }
  });

  it('tears the process down at its owner even when its registry entry has lapsed (the owner still runs it)', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'lapsed entry');
    const s = await h.startSession(task.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    await h.life.lapse(exec.execution_id);
    const res = await stop(task.id);
    expect(h.life.stops.at(-1)).toMatchObject({ execution_id: exec.execution_id, orphaned: false });
    expect(res.executions).toEqual([{ session_id: s.id, execution_id: exec.execution_id, orphaned: false }]);
    expect((await h.getTask(task.id)).sessions[0]!.state).toBe('CANCELLED');
  });

  // The owner instance no longer runs (killed): nothing answers its stop subject, and the process went with it.
  it.each([
    { entry: 'lapsed, the row naming the owner (R-2.6)', crash: (e: Execution) => h.life.lapse(e.execution_id) },
    { entry: 'still listed: it outlives its owner by up to the TTL (R-2.2)', crash: (e: Execution) => h.life.save({ ...e, instance_id: 'life-crashed' }) },
  ])('answers stopped when the owner of an execution is not running any more; its entry $entry', async ({ crash }) => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'owner gone');
    const s = await h.startSession(task.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    await crash(exec);
    await h.sql`UPDATE orchestrator.sessions SET instance_id = 'life-crashed' WHERE id = ${s.id}`;
    const stopsBefore = h.life.stops.length;
    const res = await stop(task.id);
    expect(res).toEqual({ task_id: task.id, status: 'stopped', executions: [{ session_id: s.id, execution_id: exec.execution_id, orphaned: false }] });
    expect(h.life.stops.length).toBe(stopsBefore); // nothing reached the running fake: it is not the owner
    expect((await h.getTask(task.id)).sessions[0]!.state).toBe('CANCELLED');
    const audit = await h.sql`SELECT outcome FROM orchestrator.audit_log WHERE task_id = ${task.id} AND action = 'task.stop'`;
    expect(audit.map((a) => a.outcome)).toEqual(['stopped']);
  });

  it('records the stop in the audit log', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'audited');
    await h.startSession(task.id, 'work');
    await request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id, reason: 'wrong branch' }, { requestId: 'req-42' });
    const audit = await request(h.nc, Orch.taskAudit, { actor: operator, task_id: task.id });
    expect(audit[0]).toMatchObject({ action: 'task.stop', actor: 'operator:op-1', reason: 'wrong branch', request_id: 'req-42', outcome: 'stopped' });
  });
});
