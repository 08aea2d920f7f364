import postgres from 'postgres';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { assertInvariants, ControlLog, eventually, processAlive, type ApiClient, type InvariantBounds } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * Tree holds under crashes (R-4, B-5): the hold, its snapshots, status changes, fences and session
 * stops are one orchestrator transaction, so a kill -9 anywhere leaves all of it or none of it;
 * what follows the commit (teardowns, wakeup gating) is finished by the reconciler and by the
 * holds service's event consumer after a restart.
 */
let w: World;
let sql: postgres.Sql;
beforeAll(async () => {
  w = await startWorld({ GATEWAY_REQUEST_TIMEOUT_MS: '5000', RECONCILE_INTERVAL_MS: '1000', STALLED_TASK_AFTER_MS: '5000' });
  sql = postgres(w.stack.db.url, { max: 2, onnotice: () => undefined });
});
afterAll(async () => {
  await sql?.end();
  await w?.stop();
});

// This world's registry TTL is lifecycle's default (15 s); the rest as in fault-world.ts. A restore
// writes back a member's IN_PROGRESS snapshot although the hold cancelled its session: the
// reconciler's stalled-task repair (STALLED_TASK_AFTER_MS, 5 s here) moves it on, well within the bound.
const bounds: InvariantBounds = { graceMs: 500 + 2_000, reconcileMs: 15_000 + 5_000 + 1_000 + 10_000 };
const WITHIN_MS = bounds.reconcileMs + 20_000;
const controlLog = () => new ControlLog({ gatewayUrl: w.stack.gatewayUrl, mcpUrl: w.stack.mcpUrl, operatorToken: w.token });

async function tree(api: ApiClient, children: number) {
  const { workspace_id, task: root } = await makeTask(api, { title: 'root' });
  const kids = [];
  for (let i = 0; i < children; i++) kids.push((await makeTask(api, { workspace_id, parent_id: root.id, title: `kid ${i}` })).task);
  return { workspace_id, root, kids };
}

it('kill -9 of the holds service around a cancel: the cancel stands; after a restart the hold gates its members and restore works', async () => {
  const { workspace_id, root, kids } = await tree(w.api, 2);
  const s = await w.api.startSession(kids[0]!.id, { prompt: sleepScript(60_000) });
  const exec = await eventually(async () => (await w.api.get(`/sessions/${s.id}`)).body.execution, 15_000);
  w.stack.services.get('holds')!.process.kill('SIGKILL');
  // A wakeup that was queued when the holds service died (nobody dispatches it while it is down).
  const queued = randomUUID();
  await sql`INSERT INTO holds.wakeups (id, task_id, workspace_id, reason, status) VALUES (${queued}, ${kids[1]!.id}, ${workspace_id}, 'queued before the crash', 'queued')`;

  const log = controlLog();
  const res = await log.holdTree(root.id, 'cancel');
  expect(res.answer.ok).toBe(true);
  const hold = (res.answer as { body: { hold: { id: string } } }).body.hold;
  expect((await w.api.get(`/sessions/${s.id}`)).body.state).toBe('CANCELLED');
  await eventually(async () => !processAlive(exec.pid), 15_000);

  await w.stack.restart('holds');
  // The tree_hold.created event reaches the restarted service: members gated, the queued wakeup cancelled or refused.
  await eventually(async () => (await sql`SELECT task_id FROM holds.held_tasks WHERE hold_id = ${hold.id}`).length === 3, 20_000);
  const wk = await eventually(async () => {
    const x = (await w.api.get(`/wakeups/${queued}`)).body;
    return x.status === 'cancelled' || x.status === 'finished' ? x : null;
  }, 20_000);
  expect(wk).toMatchObject({ skip_reason: 'tree_cancelled', session_id: null });

  const restored = await w.api.post(`/tasks/${root.id}/tree/restore`);
  expect(restored.status).toBe(200);
  for (const t of [root, ...kids]) expect((await w.api.get(`/tasks/${t.id}`)).body.status).not.toBe('CANCELLED');
  await eventually(async () => (await sql`SELECT 1 FROM holds.held_tasks WHERE hold_id = ${hold.id}`).length === 0, 10_000);
  await assertInvariants(w.stack, { agentPids: new Map([[s.id, exec.pid as number]]), bounds, requests: log, withinMs: WITHIN_MS });
});

it('kill -9 of the orchestrator in the middle of a cancel leaves the whole hold or none of it; teardown and restore complete after the restart', async () => {
  for (const delayMs of [0, 25, 60]) {
    const { root, kids } = await tree(w.api, 2);
    const s = await w.api.startSession(kids[0]!.id, { prompt: sleepScript(60_000) });
    const exec = await eventually(async () => (await w.api.get(`/sessions/${s.id}`)).body.execution, 15_000);
    const ids = [root.id, ...kids.map((k) => k.id)];

    const log = controlLog();
    const inFlight = log.holdTree(root.id, 'cancel');
    await new Promise((r) => setTimeout(r, delayMs));
    w.stack.services.get('orchestrator')!.process.kill('SIGKILL');
    await inFlight;
    await w.stack.restart('orchestrator');

    const holds = await sql`SELECT id FROM orchestrator.tree_holds WHERE root_task_id = ${root.id} AND released_at IS NULL`;
    const statuses = await sql`SELECT status FROM orchestrator.tasks WHERE id = ANY(${ids})`;
    const cancelled = statuses.filter((r) => r.status === 'CANCELLED').length;
    if (holds.length === 1) {
      // All of it: every member cancelled with its snapshot, the session cancelled.
      expect(cancelled).toBe(ids.length);
      const [m] = await sql`SELECT count(*)::int AS n FROM orchestrator.tree_hold_members WHERE hold_id = ${holds[0]!.id}`;
      expect(m!.n).toBe(ids.length);
      expect((await w.api.get(`/sessions/${s.id}`)).body.state).toBe('CANCELLED');
    } else {
      // None of it: no task left CANCELLED without a hold that can restore it.
      expect(holds.length).toBe(0);
      expect(cancelled).toBe(0);
      expect((await w.api.ok('POST', `/tasks/${root.id}/tree/cancel`)).hold.mode).toBe('cancel');
    }
    // Whichever side of the commit the crash fell on, no agent process outlives the cancel
    // (a teardown request lost with the orchestrator is re-sent by the reconciler).
    await eventually(async () => !processAlive(exec.pid), 20_000);
    expect((await w.api.post(`/tasks/${root.id}/tree/restore`)).status).toBe(200);
    expect((await w.api.get(`/tasks/${kids[1]!.id}`)).body.status).toBe('TODO');
    // Whatever the cancel's caller was told holds, and every member's hold and restore is audited.
    await assertInvariants(w.stack, { agentPids: new Map([[s.id, exec.pid as number]]), bounds, requests: log, withinMs: WITHIN_MS });
  }
});
