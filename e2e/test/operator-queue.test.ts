import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '@kandev/testkit';
import { makeTask, sharedWorld, sleepScript, type SharedWorld } from './support.js';

/**
 * The routes the console and the CLI add to drive work: POST /tasks/:id/queue, the operator's
 * queued delivery, and GET /agents, the names a session can start with.
 */
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

describe('POST /tasks/:id/queue', () => {
  it('queues behind a running turn, delivers when the turn ends, and is audited', async () => {
    const { task } = await makeTask(w.api, { title: 'operator queue' });
    const s = await w.api.startSession(task.id, { prompt: JSON.stringify({ script: [{ sleep_ms: 1_500 }] }) });
    await eventually(async () => (await w.api.session(s.id)).state === 'RUNNING', 15_000);
    const r = await w.api.post(`/tasks/${task.id}/queue`, { prompt: 'after the turn' });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ task_id: task.id, session_id: s.id, prompt: 'after the turn', delivered: false, queued_by: expect.any(String) });
    expect((await w.api.queue(task.id)).map((m) => m.id)).toEqual([r.body.id]);
    // The turn ends; the queue runs: the message becomes the next turn.
    await eventually(async () => (await w.api.session(s.id)).turns.length === 2, 20_000);
    expect(await w.api.queue(task.id)).toEqual([]);
    const audit = (await w.api.ok('GET', `/tasks/${task.id}/audit`)) as { action: string; outcome: string }[];
    expect(audit.find((a) => a.action === 'queue.add')).toMatchObject({ outcome: 'queued' });
    await w.api.post(`/tasks/${task.id}/stop`);
  });

  it('delivers at once to an idle session', async () => {
    const { task } = await makeTask(w.api, { title: 'operator queue idle' });
    const s = await w.api.startSession(task.id, {});
    await eventually(async () => (await w.api.session(s.id)).state === 'WAITING_FOR_INPUT', 20_000);
    const r = await w.api.post(`/tasks/${task.id}/queue`, { prompt: 'right away' });
    expect(r.body).toMatchObject({ delivered: true });
    expect((await w.api.session(s.id)).turns).toHaveLength(1);
    await w.api.post(`/tasks/${task.id}/stop`);
  });

  it('refuses a task without a live session, a cancelled task and a missing prompt, storing nothing', async () => {
    const { task } = await makeTask(w.api, { title: 'operator queue refusals' });
    const none = await w.api.post(`/tasks/${task.id}/queue`, { prompt: 'nobody listens' });
    expect(none.status).toBe(409);
    expect(none.body.error.code).toBe('CONFLICT');
    const s = await w.api.startSession(task.id, { prompt: sleepScript(60_000) });
    const empty = await w.api.post(`/tasks/${task.id}/queue`, {});
    expect(empty.status).toBe(400);
    expect(empty.body.error.code).toBe('VALIDATION_ERROR');
    await w.api.ok('POST', `/tasks/${task.id}/tree/cancel`);
    const cancelled = await w.api.post(`/tasks/${task.id}/queue`, { prompt: 'too late' });
    expect(cancelled.status).toBe(409);
    expect(await w.api.queue(task.id)).toEqual([]);
    expect((await w.api.session(s.id)).state).toBe('CANCELLED');
  });
});

describe('GET /agents', () => {
  it('lists the catalogue, and wants a token', async () => {
    const r = await w.api.agents();
    expect(r.agents).toEqual(expect.arrayContaining(['scripted-acp', 'scripted-codex']));
    expect((await fetch(`${w.stack.gatewayUrl}/agents`)).status).toBe(401);
  });
});
