import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Budget, Holds, Orch, OrchTree, type LaunchRequest } from '@kandev/contracts';
import { createLogger, EventPublisher, on, request, serveEndpoints } from '@kandev/runtime';
import { eventually } from '@kandev/testkit';
import type { OrchRuntime } from '../src/flows/context.js';
import { reconcileOnce } from '../src/flows/reconcile.js';
import { operator, startHarness, type Harness } from './harness.js';

/**
 * The one start rule (domain/start.ts) through every path that starts a session, and what R-10
 * asks of the controls together: a CANCELLED task gets no session, starts of one task
 * coalesce (ADR 0060), a paused member's message waits in its queue, `not_running` writes
 * nothing, preview sees a hold on any member, and the one lock order.
 */
let h: Harness;
beforeAll(async () => {
  h = await startHarness();
  // The holds service at the subject level: preview counts wakeups, holds are told to it.
  await serveEndpoints(h.nc, { service: 'holds', instanceId: 'holds-fake', queue: 'holds', log: createLogger('fake-holds', 'silent') }, [
    on(Holds.wakeupCount, async () => ({ count: 0 })),
    on(Holds.holdApplied, async () => ({ cancelled_wakeups: 0 })),
    on(Holds.holdReleased, async () => ({ released: true })),
    // A resume asks for the tree's budget (B-8): none in these trees.
    on(Budget.ofRoot, async () => ({ budget: null })),
  ]);
});
afterAll(async () => h?.stop());
const rt = () => h.svc.runtime as OrchRuntime;

async function family() {
  const ws = await h.workspace();
  const parent = await h.task(ws.id, 'parent');
  const child = await h.task(ws.id, 'child', parent.id);
  return { ws, parent, child };
}
const cancel = (task_id: string) => request(h.nc, Orch.taskUpdate, { actor: operator, task_id, status: 'CANCELLED' });
const wakeup = (task_id: string, wakeup_id = randomUUID()) => request(h.nc, OrchTree.wakeupLaunch, { wakeup_id, task_id, prompt: 'wake up' });
const queueOf = (task_id: string) => request(h.nc, Orch.taskQueue, { actor: operator, task_id });
const launchesOf = (task_id: string) => h.life.launches.filter((id) => h.life.registry.get(id)?.task_id === task_id);

/** Hold every launch of this task in lifecycle until released: a start stays in flight meanwhile. */
function holdLaunches(task_id: string) {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  const previous = h.life.beforeAdmit;
  h.life.beforeAdmit = async (req: LaunchRequest) => {
    if (req.task_id === task_id) await released;
  };
  return () => {
    h.life.beforeAdmit = previous;
    release();
  };
}

describe('a CANCELLED task gets no new session from any path (R-10.1)', () => {
  it('operator start, wakeup and message are refused, and nothing is written, queued or launched', async () => {
    const { parent, child } = await family();
    await cancel(child.id);
    const launches = h.life.launches.length;
    const before = await h.snapshot();
    await expect(h.startSession(child.id, 'hello')).rejects.toMatchObject({ code: 'CONFLICT', details: { reason: 'task_cancelled' } });
    expect(await wakeup(child.id)).toMatchObject({ launched: false, hold_mode: null, skip_reason: 'task_cancelled' });
    await expect(h.message(parent.id, child.id, 'are you there?')).rejects.toMatchObject({ code: 'CONFLICT', details: { reason: 'task_cancelled' } });
    await expect(h.message(parent.id, child.id, 'now!', 'interrupt')).rejects.toMatchObject({ code: 'CONFLICT' });
    expect(await h.snapshot()).toEqual(before);
    expect(h.life.launches.length).toBe(launches);
  });

  it('a message to a CANCELLED task whose session still runs is refused before it is stored', async () => {
    const { parent, child } = await family();
    await h.startSession(child.id, 'work');
    await cancel(child.id);
    await expect(h.message(parent.id, child.id, 'more work')).rejects.toMatchObject({ code: 'CONFLICT', details: { reason: 'task_cancelled' } });
    expect(await queueOf(child.id)).toEqual([]);
  });

  it('a message racing the cancel of its target is refused once the cancel commits, not stored', async () => {
    const { parent, child } = await family();
    await h.startSession(child.id, 'work');
    let commit!: () => void;
    const committing = new Promise<void>((r) => (commit = r));
    let cancelled!: () => void;
    const holdsRow = new Promise<void>((r) => (cancelled = r));
    // A cancel in flight: the row is CANCELLED in its transaction, not yet committed.
    const cancel = h.sql.begin(async (tx) => {
      await tx`UPDATE orchestrator.tasks SET status = 'CANCELLED', cancelled_at = now() WHERE id = ${child.id}`;
      cancelled();
      await committing;
    });
    await holdsRow;
    // The message's unlocked read still sees the old status; its store waits for the cancel's row.
    const message = h.message(parent.id, child.id, 'more work').catch((e: unknown) => e);
    try {
      await eventually(async () => {
        const [row] = await h.sql<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`;
        return row!.n >= 1;
      }, 10_000);
    } finally {
      commit();
      await cancel;
    }
    expect(await message).toMatchObject({ code: 'CONFLICT', details: { reason: 'task_cancelled' } });
    expect(await queueOf(child.id)).toEqual([]);
  });

  it('another status set by an operator lets it start again', async () => {
    const { child } = await family();
    await cancel(child.id);
    await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: child.id, status: 'TODO' });
    expect((await h.startSession(child.id, 'again')).state).not.toBe('FAILED');
  });
});

describe('starts of one task coalesce: at most one in flight (ADR 0060)', () => {
  it('20 concurrent operator starts while the first launch is in flight: one launch, one session, every answer that session', async () => {
    const { child } = await family();
    const release = holdLaunches(child.id);
    let answered = 0;
    const answers = Array.from({ length: 20 }, () => h.startSession(child.id, 'hello').finally(() => answered++));
    // The first start is in flight (its launch waits in lifecycle); the 19 others join it and answer
    // without waiting for that launch.
    await eventually(async () => answered === 19, 15_000);
    expect(launchesOf(child.id)).toHaveLength(1);
    release();
    const all = await Promise.all(answers);
    expect(new Set(all.map((s) => s.id)).size).toBe(1);
    expect(all.filter((s) => s.replayed).length).toBe(19);
    const t = await h.getTask(child.id);
    expect(t.sessions.map((s) => s.state)).toEqual([expect.not.stringMatching(/FAILED/)]);
    expect(launchesOf(child.id)).toHaveLength(1);
  });

  it('20 concurrent wakeups: one launch; the others join the session in flight, or the live one', async () => {
    const { child } = await family();
    const release = holdLaunches(child.id);
    let answered = 0;
    const answers = Array.from({ length: 20 }, () => wakeup(child.id).finally(() => answered++));
    await eventually(async () => answered === 19, 15_000);
    expect(launchesOf(child.id)).toHaveLength(1);
    release();
    const all = await Promise.all(answers);
    const t = await h.getTask(child.id);
    expect(t.sessions).toHaveLength(1);
    expect(all.map((a) => (a.launched ? a.session_id : null))).toEqual(Array(20).fill(t.sessions[0]!.id));
    expect(all.filter((a) => a.launched && a.joined)).toHaveLength(19);
    // Later wakeups coalesce into the live session too.
    expect(await wakeup(child.id)).toEqual({ launched: true, session_id: t.sessions[0]!.id, joined: true });
    expect(launchesOf(child.id)).toHaveLength(1);
  });

  it('a message to a child whose start is in flight joins that session’s queue (queued), it is not a second start', async () => {
    const { parent, child } = await family();
    const release = holdLaunches(child.id);
    const first = h.message(parent.id, child.id, 'first');
    await eventually(async () => launchesOf(child.id).length === 1, 10_000);
    const second = await h.message(parent.id, child.id, 'second');
    release();
    const started = await first;
    expect(started.status).toBe('started');
    expect(second).toEqual({ task_id: child.id, session_id: started.session_id, status: 'queued' });
    expect(launchesOf(child.id)).toHaveLength(1);
  });
});

describe('a message to a paused member is stored (R-10.2)', () => {
  it('answers queued with no session, shows in the queue, and the first session after the resume delivers it', async () => {
    const { parent, child } = await family();
    await h.startSession(child.id, 'working');
    const { hold } = await request(h.nc, OrchTree.pause, { actor: operator, task_id: parent.id });
    expect(await h.message(parent.id, child.id, 'after the pause')).toEqual({ task_id: child.id, session_id: null, status: 'queued' });
    expect((await queueOf(child.id)).map((m) => [m.prompt, m.sender_task_id, m.session_id])).toEqual([['after the pause', parent.id, null]]);
    // Still held: no path starts it.
    await expect(h.startSession(child.id)).rejects.toMatchObject({
      code: 'CONFLICT',
      details: { hold_id: hold.id, hold_mode: 'pause', reason: 'tree_paused' },
    });
    expect(await wakeup(child.id)).toMatchObject({ launched: false, hold_mode: 'pause', skip_reason: 'tree_paused' });

    await request(h.nc, OrchTree.resume, { actor: operator, task_id: parent.id });
    const s = await h.startSession(child.id);
    await eventually(async () => h.life.prompts.some((p) => p.prompt === 'after the pause' && h.life.registry.get(p.execution_id)?.session_id === s.id), 5_000);
    expect(await queueOf(child.id)).toEqual([]);
  });
});

describe('not_running is read-only (R-10.3)', () => {
  it('a RUNNING row whose execution is gone: not_running, same updated_at, no teardown; the reconciler repairs the row', async () => {
    const { parent, child } = await family();
    const s = await h.startSession(child.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    await h.life.forget(exec.execution_id);
    const before = await h.getTask(child.id);
    const stops = h.life.stops.length;
    expect(await h.stopChild(parent.id, child.id)).toEqual({ task_id: child.id, status: 'not_running' });
    const after = await h.getTask(child.id);
    expect(after.updated_at).toBe(before.updated_at);
    expect(after.sessions).toEqual(before.sessions);
    expect(after.sessions[0]!.state).toBe('RUNNING');
    expect(h.life.stops.length).toBe(stops);

    await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '1 minute' WHERE id = ${s.id}`;
    expect((await reconcileOnce(rt())).lost).toBeGreaterThanOrEqual(1);
    expect((await h.getTask(child.id)).sessions[0]).toMatchObject({ state: 'FAILED', error_message: expect.stringMatching(/lost/) });
  });
});

describe('preview sees a hold on any member (R-10.4)', () => {
  it("names a child subtree's hold when previewing the root", async () => {
    const { ws, parent } = await family();
    const a = await h.task(ws.id, 'a', parent.id);
    const aa = await h.task(ws.id, 'aa', a.id);
    const { hold } = await request(h.nc, OrchTree.pause, { actor: operator, task_id: a.id });
    const preview = await request(h.nc, OrchTree.preview, { actor: operator, task_id: parent.id });
    expect(preview.active_hold).toMatchObject({ id: hold.id, root_task_id: a.id, mode: 'pause' });
    expect((await request(h.nc, OrchTree.preview, { actor: operator, task_id: aa.id })).active_hold).toMatchObject({ id: hold.id });
    await expect(request(h.nc, OrchTree.cancel, { actor: operator, task_id: parent.id })).rejects.toMatchObject({ code: 'CONFLICT' });
    await request(h.nc, OrchTree.resume, { actor: operator, task_id: a.id });
    expect((await request(h.nc, OrchTree.preview, { actor: operator, task_id: parent.id })).active_hold).toBeNull();
  });
});

describe('one lock order: task, then session (ADR 0060)', () => {
  it("an execution's end waits for the task before it takes the session: a start's repair holding the task is not deadlocked", async () => {
    const { child } = await family();
    const s = await h.startSession(child.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let taskLocked!: () => void;
    const holdsTask = new Promise<void>((r) => (taskLocked = r));
    // What a failed launch's repair does: the task's row lock, then its session's. NOWAIT: with the
    // handler holding the session's guard while it waits for the task (the old order), this is where
    // PostgreSQL found the deadlock cycle; here it fails at once instead of one of the two aborting.
    const repair = h.sql.begin(async (tx) => {
      await tx`SELECT id FROM orchestrator.tasks WHERE id = ${child.id} FOR NO KEY UPDATE`;
      taskLocked();
      await released;
      await tx`SELECT id FROM orchestrator.sessions WHERE id = ${s.id} FOR NO KEY UPDATE NOWAIT`;
      return 'repaired';
    });
    await holdsTask;
    await new EventPublisher(h.nc).emit(
      'execution.stopped',
      { workspace_id: child.workspace_id, task_id: child.id, session_id: s.id },
      { execution_id: exec.execution_id, how: 'killed', grace_ms: 0, reason: 'test', pid: null, exit_code: null, signal: 'SIGKILL' },
    );
    // The handler is now waiting for a lock: the task's, before it took the session's guard.
    await eventually(async () => {
      const [row] = await h.sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`;
      return row!.n >= 1;
    }, 10_000);
    release();
    expect(await repair).toBe('repaired');
    await eventually(async () => (await h.getTask(child.id)).sessions[0]!.state === 'FAILED', 10_000);
  });
});
