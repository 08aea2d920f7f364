import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { eventually, processAlive, WsClient } from '@kandev/testkit';
import { makeTask, sleepScript, sharedWorld, type SharedWorld } from './support.js';

/** R-2 end to end: the task stop reaches an orphaned execution whose session the database already calls FAILED. */
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

it('halts an orphan, keeps FAILED and its message, is idempotent afterwards', async () => {
  const { task } = await makeTask(w.api);
  const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000) });
  const exec = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution);
  // The database says the session is over while its process lives on (the seed's orphan).
  const sql = postgres(w.stack.db.url, { max: 1, onnotice: () => undefined });
  await sql`UPDATE orchestrator.sessions SET state = 'FAILED', error_message = 'agent never started', completed_at = now() WHERE id = ${session.id}`;
  await sql.end();
  const listed = (await w.api.get(`/tasks/${task.id}/executions`)).body;
  expect(listed).toEqual([expect.objectContaining({ execution_id: exec.execution_id, session_id: session.id, pid: exec.pid, protocol: 'acp' })]);

  const ws = await WsClient.connect(w.stack.wsUrl, w.token);
  try {
    await ws.request('subscribe', { task_id: task.id });
    const res = await w.api.post(`/tasks/${task.id}/stop`);
    expect(res).toEqual({
      status: 200,
      body: { task_id: task.id, status: 'stopped', executions: [{ session_id: session.id, execution_id: exec.execution_id, orphaned: true }] },
    });
    await ws.waitFor((f) => f.action === 'execution.stopped' && f.payload.execution_id === exec.execution_id);
  } finally {
    ws.close();
  }
  await eventually(async () => !processAlive(exec.pid), 10_000);
  const after = (await w.api.get(`/sessions/${session.id}`)).body;
  expect(after).toMatchObject({ state: 'FAILED', error_message: 'agent never started' });
  // Once gone: nothing to stop, nothing changes.
  await eventually(async () => (await w.api.get(`/tasks/${task.id}/executions`)).body.length === 0);
  const again = await w.api.post(`/tasks/${task.id}/stop`);
  expect(again.status).toBe(404);
  expect(again.body.error).toMatchObject({ code: 'NOT_FOUND', message: 'execution not found' });
  const audit = (await w.api.get(`/tasks/${task.id}/audit`)).body;
  expect(audit[0]).toMatchObject({ action: 'task.stop', outcome: 'stopped' });
});
