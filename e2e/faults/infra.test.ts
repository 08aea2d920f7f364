import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import postgres from 'postgres';
import { assertInvariants, eventually, type InvariantBounds } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from '../test/support.js';

/**
 * Issue 11, infrastructure faults in the middle of a stop (`npm run test:faults`): nats-server
 * restarted (down 2 s, same port and JetStream store), and PostgreSQL refusing connections to the
 * system's database for 3 s. Every request is answered; after recovery the invariant checker passes,
 * and the system serves again.
 */
const REGISTRY_TTL_MS = 3_000;
const RECONCILE_INTERVAL_MS = 1_000;
const TEARDOWN_GRACE_MS = 500;
const bounds: InvariantBounds = { graceMs: TEARDOWN_GRACE_MS + 2_000, reconcileMs: REGISTRY_TTL_MS + 5_000 + RECONCILE_INTERVAL_MS };
const WITHIN_MS = bounds.reconcileMs + 30_000;

let w: World;
const agentPids = new Map<string, number>();
beforeAll(async () => {
  w = await startWorld({ REGISTRY_TTL_MS: String(REGISTRY_TTL_MS), RECONCILE_INTERVAL_MS: String(RECONCILE_INTERVAL_MS), TEARDOWN_GRACE_MS: String(TEARDOWN_GRACE_MS) });
}, 120_000);
afterAll(async () => w?.stop());

async function running(): Promise<{ taskId: string; sessionId: string }> {
  const { task } = await makeTask(w.api);
  const s = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(120_000) });
  const e = await eventually(async () => {
    const list = (await w.api.get(`/tasks/${task.id}/executions`)).body as Array<{ session_id: string; pid: number | null; status: string }>;
    return list.find((x) => x.session_id === s.id && x.pid && x.status === 'RUNNING') ?? null;
  }, 20_000);
  agentPids.set(s.id, e.pid!);
  return { taskId: task.id, sessionId: s.id };
}

/** The system serves again: a new session starts and stops. */
async function servesAgain() {
  const r = await eventually(async () => {
    try {
      return await running();
    } catch {
      return null;
    }
  }, 30_000, 500);
  expect((await w.api.post(`/tasks/${r.taskId}/stop`)).status).toBe(200);
}

describe('infrastructure faults', () => {
  it('nats-server restarted in the middle of a stop', async () => {
    const a = await running();
    const b = await running();
    const stopping = w.api.post(`/tasks/${a.taskId}/stop`);
    await w.stack.nats.restart(2_000);
    const stop = await stopping;
    expect(stop.status).toBeGreaterThanOrEqual(200);
    // Whatever the answer, a repeated stop after recovery is accepted or finds nothing to stop.
    let last: unknown = null;
    await eventually(async () => {
      const again = await w.api.post(`/tasks/${a.taskId}/stop`);
      last = again;
      return again.status === 200 || again.status === 404 ? again : null;
    }, 30_000, 500).catch((e) => {
      throw new Error(`${(e as Error).message}; first answer ${JSON.stringify(stop)}, last ${JSON.stringify(last)}`);
    });
    await assertInvariants(w.stack, { agentPids, bounds, withinMs: WITHIN_MS });
    expect((await w.api.get(`/sessions/${b.sessionId}`)).body.state).toBe('RUNNING');
    await servesAgain();
  });

  it('PostgreSQL refusing connections for 3 s in the middle of a stop', async () => {
    const a = await running();
    const admin = postgres(w.stack.db.url.replace(/\/[^/?]+(\?|$)/, '/postgres$1'), { max: 1, onnotice: () => undefined });
    const db = w.stack.db.name;
    try {
      await admin.unsafe(`ALTER DATABASE ${db} WITH ALLOW_CONNECTIONS false`);
      await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ${db} AND pid <> pg_backend_pid()`;
      const stopping = w.api.post(`/tasks/${a.taskId}/stop`);
      await new Promise((r) => setTimeout(r, 3_000));
      await admin.unsafe(`ALTER DATABASE ${db} WITH ALLOW_CONNECTIONS true`);
      const stop = await stopping;
      expect(stop.status).toBeGreaterThanOrEqual(200);
    } finally {
      await admin.unsafe(`ALTER DATABASE ${db} WITH ALLOW_CONNECTIONS true`).catch(() => undefined);
      await admin.end();
    }
    await eventually(async () => {
      const again = await w.api.post(`/tasks/${a.taskId}/stop`);
      return again.status === 200 || again.status === 404 ? again : null;
    }, 30_000, 500);
    await assertInvariants(w.stack, { agentPids, bounds, withinMs: WITHIN_MS });
    await servesAgain();
  });
});
