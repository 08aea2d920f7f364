import { afterAll, beforeAll, expect, it } from 'vitest';
import { Orch } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { operator, startHarness, type Harness } from './harness.js';

/**
 * B-1: a launch that began before a stop and registers after it is refused. The fake lifecycle
 * registers the execution, then parks before asking for admission; the stop runs in that window.
 */
let h: Harness;

/** Park the next launch after it registered and before it asks for admission. */
function parkNextLaunch() {
  let release!: () => void;
  const parked = new Promise<void>((r) => (release = r));
  let registered!: () => void;
  const isRegistered = new Promise<void>((r) => (registered = r));
  h.life.beforeAdmit = async () => {
    registered();
    h.life.beforeAdmit = null;
    await parked;
  };
  return { release, isRegistered };
}

beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => h?.stop());

it('refuses a launch that registers after a stop was accepted for its task', async () => {
  const ws = await h.workspace();
  const parent = await h.task(ws.id, 'parent');
  const child = await h.task(ws.id, 'child', parent.id);
  const { release, isRegistered } = parkNextLaunch();
  const launching = h.startSession(child.id, 'racing work').then(
    (s) => ({ ok: true as const, s }),
    (e) => ({ ok: false as const, e }),
  );
  await isRegistered;
  // The stop lands while the launch is between registration and admission.
  const res = await h.stopChild(parent.id, child.id);
  expect(res.status).toBe('stopped');
  release();
  const outcome = await launching;
  expect(outcome.ok).toBe(false);
  if (!outcome.ok) expect(outcome.e).toMatchObject({ code: 'CONFLICT' });
  // The fenced execution was removed from the registry (lifecycle tears it down) and the session stays CANCELLED.
  expect([...h.life.registry.values()].filter((e) => e.task_id === child.id && e.status !== 'STOPPING')).toHaveLength(0);
  const t = await h.getTask(child.id);
  expect(t.sessions.map((s) => s.state)).toEqual(['CANCELLED']);
  // A launch that starts after the stop is admitted normally: the task can be started again.
  const again = await h.startSession(child.id, 'fresh start');
  expect(again.state).toBe('RUNNING');
});

it('refuses a launch whose session was stopped by an operator task stop meanwhile', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 'solo');
  const { release, isRegistered } = parkNextLaunch();
  const launching = h.startSession(task.id, 'work').catch((e) => e);
  await isRegistered;
  const res = await request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id });
  expect(res.status).toBe('stopped');
  release();
  expect(await launching).toMatchObject({ code: 'CONFLICT' });
});

it('refuses on the epoch alone: the fence moved while the session is still active', async () => {
  // The state between a stop's two steps: it has bumped the task's fence (its own commit) but not
  // yet cancelled the session. Only the epoch comparison can refuse the launch here; the session
  // check alone would admit it (the tests above pass without the epoch check).
  const ws = await h.workspace();
  const task = await h.task(ws.id, 'window');
  const { release, isRegistered } = parkNextLaunch();
  const launching = h.startSession(task.id, 'work').catch((e) => e);
  await isRegistered;
  await h.sql`UPDATE orchestrator.tasks SET fence_epoch = fence_epoch + 1 WHERE id = ${task.id}`;
  const [session] = await h.sql<{ state: string }[]>`SELECT state FROM orchestrator.sessions WHERE task_id = ${task.id}`;
  expect(session!.state).toBe('STARTING');
  release();
  expect(await launching).toMatchObject({ code: 'CONFLICT', message: expect.stringMatching(/stop was accepted/) });
});
