import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient, eventually, processAlive } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * B-8 exactly once across replicas: two processes of every service (two gateways, two holds, two
 * orchestrators). Cost events that cross the cap at once, sent through both gateways, reach both
 * holds replicas; whichever decides the crossing, the tree gets one hold, made by one orchestrator.
 */
let w: World;
let other: ApiClient;
beforeAll(async () => {
  w = await startWorld({}, { replicas: 2 });
  other = new ApiClient(w.stack.replicas('gateway')[0]!.urls.http!, w.token);
});
afterAll(async () => w?.stop());

/** The pause's bound (1 s propagation wait in a 5 s request) plus headroom for a loaded runner. */
const PAUSE_BOUND_MS = 10_000;

describe('tree budgets on two replicas of every service', () => {
  it('concurrent cost events across the cap, through both gateways: one hold, every agent of the tree gone', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'replicated budget' });
    const kids = await Promise.all(
      [0, 1, 2, 3].map(async (i) => (await makeTask(w.api, { workspace_id, parent_id: root.id, title: `kid ${i}` })).task as { id: string }),
    );
    const sessions = await Promise.all(kids.slice(0, 2).map((k) => w.api.ok('POST', `/tasks/${k.id}/sessions`, { prompt: sleepScript(120_000) })));
    const pids = await Promise.all(
      sessions.map((s) => eventually(async () => (await w.api.get(`/sessions/${s.id}`)).body.execution?.pid as number | undefined, 15_000)),
    );
    await w.api.ok('PUT', `/tasks/${root.id}/tree/budget`, { limit_cents: 1000 });
    // Every task known to the cost projection first, so the burst races on the budget alone.
    await Promise.all(
      kids.map((k) =>
        w.api.ok('POST', '/cost-events', { task_id: k.id, usage_event_id: randomUUID(), cost_cents: 200, tokens_in: 1, tokens_cached_in: 0, tokens_out: 1 }),
      ),
    );
    // 800 spent; 16 events of 25 at once through both gateways cross 1000 together.
    const burst = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        (i % 2 ? other : w.api).call('POST', '/cost-events', {
          task_id: kids[i % kids.length]!.id,
          usage_event_id: randomUUID(),
          cost_cents: 25,
          tokens_in: 1,
          tokens_cached_in: 0,
          tokens_out: 1,
        }),
      ),
    );
    expect(burst.every((r) => r.status === 201)).toBe(true);
    const budget = await eventually(async () => {
      const x = (await other.get(`/tasks/${root.id}/tree/budget`)).body;
      return x.hold_id ? x : null;
    }, PAUSE_BOUND_MS);
    expect(budget).toMatchObject({ state: 'exceeded', spent_cents: 1200 });
    for (const s of sessions) expect((await w.api.get(`/sessions/${s.id}`)).body.state).toBe('CANCELLED');
    for (const pid of pids) await eventually(async () => !processAlive(pid), 15_000);
    const audit = (await w.api.get(`/tasks/${root.id}/audit`)).body as Array<{ action: string; actor: string }>;
    expect(audit.filter((a) => a.action === 'tree.budget_exceeded')).toHaveLength(1);
    expect(audit.filter((a) => a.action === 'tree.pause' && a.actor === 'system:budget')).toHaveLength(1);
    expect((await other.post(`/tasks/${root.id}/tree/preview`)).body.active_hold).toMatchObject({ id: budget.hold_id, created_by: 'budget' });
    // Either orchestrator refuses the resume while the tree is over its cap.
    for (const api of [w.api, other]) expect((await api.post(`/tasks/${root.id}/tree/resume`)).status).toBe(409);
    await other.ok('PUT', `/tasks/${root.id}/tree/budget`, { limit_cents: 10_000 });
    expect((await w.api.post(`/tasks/${root.id}/tree/resume`)).status).toBe(200);
  });
});
