import { afterAll, beforeAll, expect, it } from 'vitest';
import type { OrchRuntime } from '../src/flows/context.js';
import { reconcileOnce } from '../src/flows/reconcile.js';
import { startHarness, type Harness } from './harness.js';

/** R-6.4 / B-4: the database and the registry do not disagree for long. */
let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => h?.stop());
const rt = () => h.svc.runtime as OrchRuntime;

it('marks an active session FAILED once its execution left the registry (dead lifecycle instance)', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 't');
  const s = await h.startSession(task.id, 'work');
  const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
  await h.life.forget(e.execution_id);
  // Fresh rows are left alone (a launch or stop may be in progress).
  expect((await reconcileOnce(rt())).lost).toBe(0);
  await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '1 minute' WHERE id = ${s.id}`;
  expect((await reconcileOnce(rt())).lost).toBe(1);
  const t = await h.getTask(task.id);
  expect(t.sessions[0]).toMatchObject({ state: 'FAILED', error_message: expect.stringMatching(/lost/) });
  expect((await reconcileOnce(rt())).lost).toBe(0);
});

it('a session held by a control action in flight does not stall the reconciliation of the others', async () => {
  const ws = await h.workspace();
  const [busy, lost] = [await h.task(ws.id, 'busy'), await h.task(ws.id, 'lost')];
  const [sb, sl] = [await h.startSession(busy.id, 'work'), await h.startSession(lost.id, 'work')];
  for (const s of [sb, sl]) await h.life.forget([...h.life.registry.values()].find((x) => x.session_id === s.id)!.execution_id);
  // The held one is listed first (older), as a session whose cancel waits on a dead instance would be.
  await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '2 minutes' WHERE id = ${sb.id}`;
  await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '1 minute' WHERE id = ${sl.id}`;
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => (locked = r));
  const holder = h.sql.begin(async (tx) => {
    await tx`SELECT id FROM orchestrator.sessions WHERE id = ${sb.id} FOR UPDATE`;
    locked();
    await released;
  });
  try {
    await isLocked;
    const pass = await Promise.race([reconcileOnce(rt()), new Promise<'stalled'>((r) => setTimeout(() => r('stalled'), 5_000))]);
    expect(pass).toMatchObject({ lost: 1 });
    expect((await h.getTask(lost.id)).sessions[0]!.state).toBe('FAILED');
    expect((await h.getTask(busy.id)).sessions[0]!.state).toBe('RUNNING');
  } finally {
    release();
    await holder;
  }
  // Released: the next pass reconciles it.
  expect((await reconcileOnce(rt())).lost).toBe(1);
});

it.each([
  ['a parent', 'stopped_by_parent_task', 'stopped_by_parent_task'],
  ['a tree pause', 'tree_paused', 'tree_paused'],
  ['an unrecorded', null, 'stopped_by_operator'],
])(
  'sends the stop again for a CANCELLED session whose process is still registered and not stopping, with the reason of %s stop',
  async (_, cancelReason, sent) => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'work');
    const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
    // As if the teardown request had been lost: the session says CANCELLED, the execution still runs.
    await h.sql`UPDATE orchestrator.sessions SET state = 'CANCELLED', cancel_reason = ${cancelReason}, updated_at = now() - interval '1 minute' WHERE id = ${s.id}`;
    const before = h.life.stops.filter((x) => x.execution_id === e.execution_id).length;
    expect((await reconcileOnce(rt())).restopped).toBe(1);
    expect(h.life.stops.filter((x) => x.execution_id === e.execution_id).length).toBe(before + 1);
    expect(h.life.stops.at(-1)).toMatchObject({ execution_id: e.execution_id, reason: sent });
    // Now STOPPING in the registry: nothing more to do.
    expect((await reconcileOnce(rt())).restopped).toBe(0);
  },
);

it('closes a turn whose turn.completed never arrived once lifecycle reports the execution idle past the grace', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 't');
  const s = await h.startSession(task.id, 'work');
  const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
  expect(e.status).toBe('RUNNING');
  await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '1 minute' WHERE id = ${s.id}`;
  // Still in flight in lifecycle: nothing to reconcile.
  expect((await reconcileOnce(rt())).turnsClosed).toBe(0);

  // Lifecycle saw the turn end, but its turn.completed was lost.
  e.status = 'READY';
  e.turn_id = null;
  e.updated_at = new Date().toISOString();
  await h.life.save(e);
  // Within the grace the event may still be on its way.
  expect((await reconcileOnce(rt())).turnsClosed).toBe(0);
  e.updated_at = new Date(Date.now() - 60_000).toISOString();
  await h.life.save(e);
  // A turn that began after lifecycle last changed the execution is not the lost one.
  await h.sql`UPDATE orchestrator.turns SET started_at = now() WHERE session_id = ${s.id}`;
  expect((await reconcileOnce(rt())).turnsClosed).toBe(0);
  await h.sql`UPDATE orchestrator.turns SET started_at = now() - interval '2 minutes' WHERE session_id = ${s.id}`;

  expect((await reconcileOnce(rt())).turnsClosed).toBe(1);
  const t = await h.getTask(task.id);
  expect(t.sessions[0]!.state).toBe('WAITING_FOR_INPUT');
  const [turn] = await h.sql<
    { stop_reason: string; completed_at: Date | null }[]
  >`SELECT stop_reason, completed_at FROM orchestrator.turns WHERE session_id = ${s.id}`;
  expect(turn).toMatchObject({ stop_reason: 'lost', completed_at: expect.any(Date) });
  expect((await reconcileOnce(rt())).turnsClosed).toBe(0);
});

it('fails a STARTING session that never got an execution (its start died mid-launch), and the task leaves IN_PROGRESS', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 't');
  const s = await h.startSession(task.id, 'work');
  const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
  await h.life.forget(e.execution_id);
  // As if the orchestrator had died after recording the start and before its launch reached lifecycle.
  await h.sql`UPDATE orchestrator.sessions SET state = 'STARTING', execution_id = NULL, instance_id = NULL WHERE id = ${s.id}`;
  expect((await reconcileOnce(rt())).launchesLost).toBe(0); // a launch may still be under way
  // Past the stalled-task bound (60 s) but within LAUNCH_LOST_AFTER_MS (120 s): a start in a long launch queue, left alone.
  await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '90 seconds' WHERE id = ${s.id}`;
  expect((await reconcileOnce(rt())).launchesLost).toBe(0);
  await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '3 minutes' WHERE id = ${s.id}`;
  expect((await reconcileOnce(rt())).launchesLost).toBe(1);
  const t = await h.getTask(task.id);
  expect(t.sessions[0]).toMatchObject({ state: 'FAILED', error_message: expect.stringMatching(/launch was lost/) });
  expect(t.status).toBe('REVIEW');
  const audit = await h.sql<{ action: string }[]>`SELECT action FROM orchestrator.audit_log WHERE task_id = ${task.id} AND action = 'reconcile.launch_lost'`;
  expect(audit).toHaveLength(1);
  expect((await reconcileOnce(rt())).launchesLost).toBe(0);
});

it('settles a STARTING session whose admitted execution is idle with no turn (the start never recorded its launch)', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 't');
  const s = await h.startSession(task.id);
  const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
  await h.sql`UPDATE orchestrator.sessions SET state = 'STARTING', updated_at = now() - interval '1 minute' WHERE id = ${s.id}`;
  e.status = 'READY';
  e.turn_id = null;
  e.updated_at = new Date().toISOString();
  await h.life.save(e);
  expect((await reconcileOnce(rt())).startsSettled).toBe(0); // within the grace the start may still record it
  e.updated_at = new Date(Date.now() - 60_000).toISOString();
  await h.life.save(e);
  expect((await reconcileOnce(rt())).startsSettled).toBe(1);
  expect((await h.getTask(task.id)).sessions[0]!.state).toBe('WAITING_FOR_INPUT');
  expect((await reconcileOnce(rt())).startsSettled).toBe(0);
});
