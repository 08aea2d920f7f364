import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcp, eventually, processAlive } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * Behaviour over hours, not seconds (SPEC, B-5, B-7) with the real
 * stack and scripted agents: the stalled-task bound shortened to 1 s and the reconciler run every
 * 300 ms, so "longer than the bound" fits a test; the fault world's launch gate (2 at once, 3 s of
 * queue) for the burst.
 */
const STALLED_TASK_AFTER_MS = 1_000;
let w: World;
let sql: postgres.Sql;
beforeAll(async () => {
  w = await startWorld({
    STALLED_TASK_AFTER_MS: String(STALLED_TASK_AFTER_MS),
    RECONCILE_INTERVAL_MS: '300',
    LAUNCH_CONCURRENCY: '2',
    LAUNCH_QUEUE_WAIT_MS: '3000',
  });
  sql = postgres(w.stack.db.url, { max: 1, onnotice: () => undefined });
}, 120_000);
afterAll(async () => {
  await sql?.end();
  await w?.stop();
});

const LONG = sleepScript(120_000);
const statusOf = async (id: string) => (await w.api.get(`/tasks/${id}`)).body.status as string;
const executionOf = (sessionId: string) =>
  eventually(async () => (await w.api.get(`/sessions/${sessionId}`)).body.execution as { execution_id: string; pid: number } | null, 60_000);

/**
 * A task the reconciler must repair (IN_PROGRESS from now on, nothing running, no hold): once it is
 * REVIEW, the reconciler has run a pass more than the stalled bound after everything done before
 * this call, and what that pass did not move it does not move.
 */
async function controlTask(): Promise<() => Promise<boolean>> {
  const { task } = await makeTask(w.api, { title: 'control' });
  await sql`UPDATE orchestrator.tasks SET status = 'IN_PROGRESS', updated_at = now() WHERE id = ${task.id}`;
  return async () => (await statusOf(task.id)) === 'REVIEW';
}

async function workingTree() {
  const { workspace_id, task: root } = await makeTask(w.api, { title: 'root' });
  const { task: child } = await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'child' });
  const sessions = [];
  for (const t of [root, child]) sessions.push(await w.api.ok('POST', `/tasks/${t.id}/sessions`, { prompt: LONG }));
  for (const s of sessions) await executionOf(s.id);
  return { root, child, ids: [root.id, child.id] };
}

describe('holds are part of every repair (ADR 0025)', () => {
  it('a pause held past the stalled bound: member statuses unchanged during it and after resume', async () => {
    const { root, ids } = await workingTree();
    expect((await w.api.post(`/tasks/${root.id}/tree/pause`, { reason: 'lunch' })).status).toBe(200);
    await eventually(await controlTask(), 30_000);
    for (const id of ids) expect(await statusOf(id)).toBe('IN_PROGRESS');
    expect((await w.api.post(`/tasks/${root.id}/tree/resume`)).status).toBe(200);
    await eventually(await controlTask(), 30_000);
    for (const id of ids) expect(await statusOf(id)).toBe('IN_PROGRESS');
    const audit = (await w.api.get(`/tasks/${root.id}/audit`)).body as Array<{ action: string; reason: string }>;
    expect(audit.find((a) => a.action === 'task.needs_attention')).toMatchObject({ reason: 'resumed_without_session' });
  }, 120_000);

  it('a restored tree keeps its snapshot statuses past the stalled bound', async () => {
    const { root, ids } = await workingTree();
    expect((await w.api.post(`/tasks/${root.id}/tree/cancel`)).status).toBe(200);
    expect((await w.api.post(`/tasks/${root.id}/tree/restore`)).status).toBe(200);
    for (const id of ids) expect(await statusOf(id)).toBe('IN_PROGRESS');
    await eventually(await controlTask(), 30_000);
    for (const id of ids) expect(await statusOf(id)).toBe('IN_PROGRESS');
    const audit = (await w.api.get(`/tasks/${ids[1]}/audit`)).body as Array<{ action: string; reason: string }>;
    expect(audit.find((a) => a.action === 'task.needs_attention')).toMatchObject({ reason: 'restored_without_session' });
  }, 120_000);
});

describe('tree pause and cancel reach an orphan under a FAILED session', () => {
  it.each(['pause', 'cancel'])(
    '%s: the process is gone',
    async (mode) => {
      const { workspace_id, task: root } = await makeTask(w.api, { title: 'root' });
      const { task: child } = await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'child' });
      const s = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: LONG });
      const exec = await executionOf(s.id);
      // The database says the session is over while its process lives on (the seed's orphan).
      await sql`UPDATE orchestrator.sessions SET state = 'FAILED', error_message = 'agent never started', completed_at = now() WHERE id = ${s.id}`;
      expect((await w.api.post(`/tasks/${root.id}/tree/${mode}`)).status).toBe(200);
      await eventually(async () => !processAlive(exec.pid), 20_000);
      expect((await w.api.get(`/sessions/${s.id}`)).body).toMatchObject({ state: 'FAILED', error_message: 'agent never started' });
      await w.api.post(`/tasks/${root.id}/tree/${mode === 'pause' ? 'resume' : 'restore'}`);
    },
    120_000,
  );
});

describe("the queue is the task's", () => {
  it('queued to a busy child before a stop, delivered once by the next session, with two orchestrator replicas and a restart between', async () => {
    // A second orchestrator replica from here on (the keyed-start case below runs against both too).
    if (!w.stack.replicas('orchestrator').length) await w.stack.addReplica('orchestrator');
    const { workspace_id, task: parent } = await makeTask(w.api, { title: 'parent' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'child' });
    const busy = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: LONG });
    await executionOf(busy.id);
    const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(parent.id));
    try {
      expect((await mcp.callJson('message_task_kandev', { task_id: child.id, prompt: 'steer: left' })).json.status).toBe('queued');
      expect((await mcp.callJson('message_task_kandev', { task_id: child.id, prompt: 'steer: right' })).json.status).toBe('queued');
      expect((await mcp.callJson('stop_task_kandev', { task_id: child.id })).json.status).toBe('stopped');
    } finally {
      await mcp.close();
    }
    const queued = (await w.api.get(`/tasks/${child.id}/queue`)).body as Array<{ id: string; prompt: string }>;
    expect(queued.map((m) => m.prompt)).toEqual(['steer: left', 'steer: right']);
    // The operator drops one; a second delete of it is 404.
    expect((await w.api.call('DELETE', `/tasks/${child.id}/queue/${queued[1]!.id}`)).status).toBe(200);
    expect((await w.api.call('DELETE', `/tasks/${child.id}/queue/${queued[1]!.id}`)).status).toBe(404);

    await w.stack.restart('orchestrator');
    const next = await w.api.ok('POST', `/tasks/${child.id}/sessions`, {});
    await eventually(async () => ((await w.api.get(`/tasks/${child.id}/queue`)).body as unknown[]).length === 0, 30_000);
    await eventually(async () => {
      const d = (await w.api.get(`/sessions/${next.id}`)).body as { state: string; turns: unknown[] };
      return d.state === 'WAITING_FOR_INPUT' && d.turns.length === 1;
    }, 30_000);
    // The agent of the next session got exactly the message kept, once; the dropped one never.
    const { pid } = await executionOf(next.id);
    const prompts = w
      .agentEvents(pid)
      .filter((e) => e.kind === 'prompt')
      .map((e) => (e as { text?: string }).text);
    expect(prompts).toEqual(['steer: left']);
    // Resume answers even when nothing is paused (idempotent).
    expect((await w.api.post(`/tasks/${child.id}/queue/resume`)).body).toMatchObject({ task_id: child.id, resumed: true, delivered_message_id: null, size: 0 });
    await w.api.post(`/tasks/${child.id}/stop`);
  }, 180_000);
});

describe('Idempotency-Key on POST /tasks/:id/sessions (B-7)', () => {
  it('concurrent retries and a retry after an orchestrator restart: one session, one agent', async () => {
    const { task } = await makeTask(w.api);
    const start = () => w.api.call('POST', `/tasks/${task.id}/sessions`, { prompt: LONG }, { 'idempotency-key': 'start-1' });
    const [a, b] = await Promise.all([start(), start()]);
    expect([a.status, b.status].sort()).toEqual([200, 201]);
    expect(a.body.id).toBe(b.body.id);
    await executionOf(a.body.id);
    await w.stack.restart('orchestrator');
    const c = await start();
    expect(c.status).toBe(200);
    expect(c.body.id).toBe(a.body.id);
    // Another body under the same key: CONFLICT.
    const d = await w.api.call('POST', `/tasks/${task.id}/sessions`, { prompt: 'else' }, { 'idempotency-key': 'start-1' });
    expect(d.status).toBe(409);
    expect((await w.api.get(`/tasks/${task.id}`)).body.sessions).toHaveLength(1);
    expect((await w.api.get(`/tasks/${task.id}/executions`)).body).toHaveLength(1);
    await w.api.post(`/tasks/${task.id}/stop`);
  }, 120_000);
});

describe('launch admission (ADR 0026)', () => {
  it('100 concurrent starts: each starts or is refused with Retry-After, and a refused one leaves nothing behind', async () => {
    const { workspace_id } = await makeTask(w.api);
    const tasks: string[] = [];
    for (let i = 0; i < 100; i++) tasks.push((await w.api.ok('POST', '/tasks', { workspace_id, title: `burst ${i}` })).id);
    const answers = await Promise.all(
      tasks.map(async (id) => {
        const res = await fetch(`${w.stack.gatewayUrl}/tasks/${id}/sessions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${w.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ prompt: LONG }),
        });
        return { id, status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as any };
      }),
    );
    const started = answers.filter((a) => a.status === 201);
    const refused = answers.filter((a) => a.status === 503);
    expect(started.length + refused.length, JSON.stringify(answers.filter((a) => a.status !== 201 && a.status !== 503))).toBe(100);
    expect(started.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.body.error).toMatchObject({ code: 'UNAVAILABLE', details: { retry_after_s: expect.any(Number) } });
      expect(Number(r.retryAfter)).toBe(r.body.error.details.retry_after_s);
      expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
    }
    // None stuck: a start answered 201 either runs or has ended; what was refused wrote nothing
    // (refused at admission) or ended its session FAILED and gave the task its status back (a launch refused later).
    await eventually(async () => {
      const rows = await sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM orchestrator.sessions WHERE task_id = ANY(${tasks}::uuid[]) AND state IN ('CREATED', 'STARTING')`;
      return rows[0]!.n === 0;
    }, 60_000);
    for (const r of refused) {
      const t = (await w.api.get(`/tasks/${r.id}`)).body as { status: string; sessions: Array<{ state: string }> };
      expect(t.status).toBe('TODO');
      expect(t.sessions.every((s) => s.state === 'FAILED')).toBe(true);
    }
    await Promise.all(started.map((a) => w.api.post(`/tasks/${a.id}/stop`)));
  }, 180_000);
});
