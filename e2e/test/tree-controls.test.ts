import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, processAlive, WsClient, type ApiClient } from '@kandev/testkit';
import { makeTask, sleepScript, sharedWorld, type SharedWorld } from './support.js';

/**
 * R-4 end to end, through the public surfaces only: tree pause, resume, cancel, restore, preview,
 * the wakeup gate and the tree cost summary, with real agent processes behind the sessions.
 */
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

async function child(api: ApiClient, workspace_id: string, parent_id: string, title: string) {
  return (await makeTask(api, { workspace_id, parent_id, title })).task;
}
async function runningSession(api: ApiClient, taskId: string) {
  const s = await api.ok('POST', `/tasks/${taskId}/sessions`, { prompt: sleepScript(60_000) });
  const exec = await eventually(async () => (await api.get(`/sessions/${s.id}`)).body.execution, 15_000);
  return { session: s, pid: exec.pid as number };
}
const statusOf = async (api: ApiClient, id: string) => (await api.get(`/tasks/${id}`)).body.status as string;

describe('pause and resume', () => {
  it('pauses a tree with running sessions at two depths: sessions cancelled at once, statuses kept, processes gone, hold recorded and pushed', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'ceo' });
    const a = await child(w.api, workspace_id, root.id, 'architect');
    const b = await child(w.api, workspace_id, root.id, 'backend');
    const bb = await child(w.api, workspace_id, b.id, 'backend tests');
    const runs = await Promise.all([runningSession(w.api, a.id), runningSession(w.api, bb.id)]);
    const before = await Promise.all([root, a, b, bb].map((t) => statusOf(w.api, t.id)));

    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      await ws.request('subscribe', { task_id: bb.id });
      const preview = await w.api.ok('POST', `/tasks/${root.id}/tree/preview`);
      expect(preview).toMatchObject({ task_count: 4, active_wakeup_count: 0, active_hold: null });
      expect(preview.tasks.map((t: { id: string; depth: number }) => [t.id, t.depth])).toEqual([
        [root.id, 0],
        [a.id, 1],
        [b.id, 1],
        [bb.id, 2],
      ]);

      const res = await w.api.post(`/tasks/${root.id}/tree/pause`, { reason: 'requirements changed' });
      expect(res.status).toBe(200);
      const hold = res.body.hold;
      expect(hold).toMatchObject({
        root_task_id: root.id,
        workspace_id,
        mode: 'pause',
        reason: 'requirements changed',
        released_at: null,
        created_by: 'operator:test-operator',
      });
      expect(hold.members).toHaveLength(4);
      // Replied after the stops were accepted: every session is CANCELLED already.
      for (const r of runs) expect((await w.api.get(`/sessions/${r.session.id}`)).body.state).toBe('CANCELLED');
      // Pause does not change task statuses.
      expect(await Promise.all([root, a, b, bb].map((t) => statusOf(w.api, t.id)))).toEqual(before);
      expect(Object.fromEntries(hold.members.map((m: { task_id: string; task_status: string }) => [m.task_id, m.task_status]))).toEqual(
        Object.fromEntries([root, a, b, bb].map((t, i) => [t.id, before[i]])),
      );
      await ws.waitFor((f) => f.action === 'tree_hold.created' && f.payload.hold?.id === hold.id);
      for (const r of runs) await eventually(async () => !processAlive(r.pid), 15_000);

      const again = await w.api.post(`/tasks/${root.id}/tree/preview`);
      expect(again.body.active_hold).toMatchObject({ id: hold.id, mode: 'pause' });
      const audit = (await w.api.get(`/tasks/${bb.id}/audit`)).body;
      expect(audit[0]).toMatchObject({ action: 'tree.pause', actor: 'operator:test-operator', reason: 'requirements changed', outcome: 'held' });

      // A held task launches nothing, whoever asks.
      const refused = await w.api.post(`/tasks/${a.id}/sessions`, { prompt: 'hello' });
      expect(refused.status).toBe(409);
      expect(refused.body.error).toMatchObject({ code: 'CONFLICT', details: { hold_id: hold.id, hold_mode: 'pause' } });

      const resumed = await w.api.post(`/tasks/${root.id}/tree/resume`, { reason: 'go on' });
      expect(resumed.status).toBe(200);
      expect(resumed.body.hold).toMatchObject({ id: hold.id, released_by: 'operator:test-operator', released_reason: 'go on' });
      expect(resumed.body.hold.released_at).not.toBeNull();
      await ws.waitFor((f) => f.action === 'tree_hold.released' && f.payload.hold?.id === hold.id);
      const twice = await w.api.post(`/tasks/${root.id}/tree/resume`);
      expect(twice.status).toBe(409);
      expect(twice.body.error.code).toBe('CONFLICT');
    } finally {
      ws.close();
    }
  });

  it('gates a wakeup for a member during a pause (finished, tree_paused, no session); after resume the next wakeup launches', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'root' });
    const c = await child(w.api, workspace_id, root.id, 'child');
    const queued = await w.api.ok('POST', '/wakeups', {
      task_id: c.id,
      reason: 'task_comment',
      payload: { prompt: 'queued before the pause' },
      idempotency_key: 'k-before',
    });
    await w.api.ok('POST', `/tasks/${root.id}/tree/pause`);
    // A wakeup queued before the pause is cancelled by it ... unless the dispatcher got there first, which the hold stops.
    const early = await eventually(async () => {
      const x = (await w.api.get(`/wakeups/${queued.id}`)).body;
      return x.status === 'cancelled' || x.status === 'finished' ? x : null;
    });
    if (early.status === 'cancelled') expect(early.skip_reason).toBe('tree_paused');
    else if (early.session_id) expect((await w.api.get(`/sessions/${early.session_id}`)).body.state).toBe('CANCELLED');

    const gated = await w.api.ok('POST', '/wakeups', { task_id: c.id, reason: 'task_comment', payload: { prompt: 'hello' } });
    expect(gated).toMatchObject({ task_id: c.id, reason: 'task_comment', status: 'queued', skip_reason: null, session_id: null });
    const done = await eventually(async () => {
      const x = (await w.api.get(`/wakeups/${gated.id}`)).body;
      return x.status === 'finished' ? x : null;
    });
    expect(done).toMatchObject({ status: 'finished', skip_reason: 'tree_paused', session_id: null });
    // The gated wakeup started nothing: the only session there may be is the early wakeup's, stopped by the pause.
    const sessions = (await w.api.get(`/tasks/${c.id}`)).body.sessions as Array<{ id: string; state: string }>;
    expect(sessions.length).toBeLessThanOrEqual(1);
    expect(sessions.every((x) => x.state === 'CANCELLED')).toBe(true);

    await w.api.ok('POST', `/tasks/${root.id}/tree/resume`);
    // Nothing is replayed: the gated wakeup stays finished.
    expect((await w.api.get(`/wakeups/${gated.id}`)).body.status).toBe('finished');
    const fresh = await w.api.ok('POST', '/wakeups', { task_id: c.id, reason: 'task_comment', payload: { prompt: 'after resume' } });
    const launched = await eventually(async () => {
      const x = (await w.api.get(`/wakeups/${fresh.id}`)).body;
      return x.status === 'finished' ? x : null;
    }, 20_000);
    expect(launched.skip_reason).toBeNull();
    expect(launched.session_id).toBeTruthy();
    const s = (await w.api.get(`/sessions/${launched.session_id}`)).body;
    expect(s.task_id).toBe(c.id);
    // Same idempotency key again: the same wakeup.
    const same = await w.api.call('POST', '/wakeups', { task_id: c.id, reason: 'task_comment', idempotency_key: 'k-before' });
    expect(same.body.id).toBe(queued.id);
  });

  it('refuses nesting: a hold over a member of an active hold is CONFLICT; a child created after the hold is no member', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'root' });
    const c = await child(w.api, workspace_id, root.id, 'child');
    const { hold } = await w.api.ok('POST', `/tasks/${c.id}/tree/pause`);
    const nested = await w.api.post(`/tasks/${root.id}/tree/cancel`);
    expect(nested.status).toBe(409);
    expect(nested.body.error).toMatchObject({ code: 'CONFLICT', details: { hold_id: hold.id } });
    expect((await w.api.post(`/tasks/${c.id}/tree/pause`)).status).toBe(409);
    const late = await child(w.api, workspace_id, c.id, 'late child');
    expect(hold.members.map((m: { task_id: string }) => m.task_id)).not.toContain(late.id);
    const s = await w.api.post(`/tasks/${late.id}/sessions`, { prompt: 'not held' });
    expect(s.status).toBe(201);
    // Resume of a hold rooted elsewhere is CONFLICT and names the hold that is active.
    const wrongRoot = await w.api.post(`/tasks/${root.id}/tree/resume`);
    expect(wrongRoot.status).toBe(409);
    await w.api.ok('POST', `/tasks/${c.id}/tree/resume`);
  });
});

describe('cancel and restore', () => {
  it('cancels every member (snapshot at the instant of cancel), cancels member wakeups, and restores each to its snapshot; an already-cancelled child stays cancelled', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'root' });
    const working = await child(w.api, workspace_id, root.id, 'working');
    const dead = await child(w.api, workspace_id, root.id, 'already cancelled');
    const moving = await child(w.api, workspace_id, root.id, 'moves after preview');
    const grand = await child(w.api, workspace_id, working.id, 'grandchild');
    const run = await runningSession(w.api, working.id);
    await w.api.ok('PATCH', `/tasks/${dead.id}`, { status: 'CANCELLED' });
    await w.api.ok('PATCH', `/tasks/${moving.id}`, { status: 'REVIEW' });
    const preview = await w.api.ok('POST', `/tasks/${root.id}/tree/preview`);
    expect(preview.tasks.find((t: { id: string }) => t.id === moving.id).status).toBe('REVIEW');
    // The status changes between preview and cancel: the snapshot is what it was when cancelled.
    await w.api.ok('PATCH', `/tasks/${moving.id}`, { status: 'BLOCKED' });
    // Scheduled for later: a dispatch now would start a session and move the grandchild meanwhile.
    const wake = await w.api.ok('POST', '/wakeups', { task_id: grand.id, reason: 'scheduled', run_at: new Date(Date.now() + 3_600_000).toISOString() });

    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      await ws.request('subscribe', { task_id: moving.id });
      const before = Object.fromEntries(await Promise.all([root, working, dead, moving, grand].map(async (t) => [t.id, await statusOf(w.api, t.id)])));
      const res = await w.api.post(`/tasks/${root.id}/tree/cancel`, { reason: 'wrong approach' });
      expect(res.status).toBe(200);
      const hold = res.body.hold;
      expect(hold.mode).toBe('cancel');
      const member = (id: string) => hold.members.find((m: { task_id: string }) => m.task_id === id);
      for (const t of [root, working, dead, moving, grand]) expect(member(t.id).task_status).toBe(before[t.id]);
      expect(member(moving.id).task_status).toBe('BLOCKED');
      expect(member(dead.id).skip_reason).toBe('already_cancelled');
      expect(member(working.id).skip_reason).toBeNull();
      for (const t of [root, working, dead, moving, grand]) {
        const now = (await w.api.get(`/tasks/${t.id}`)).body;
        expect(now.status).toBe('CANCELLED');
        expect(now.cancelled_at).not.toBeNull();
      }
      expect((await w.api.get(`/sessions/${run.session.id}`)).body.state).toBe('CANCELLED');
      await ws.waitFor((f) => f.action === 'task.state_changed' && f.payload.task?.id === moving.id && f.payload.to === 'CANCELLED');
      expect((await w.api.get(`/wakeups/${wake.id}`)).body).toMatchObject({ status: 'cancelled', skip_reason: 'tree_cancelled' });
      await eventually(async () => !processAlive(run.pid), 15_000);

      expect((await w.api.post(`/tasks/${root.id}/tree/resume`)).status).toBe(409); // a cancel hold is not resumed
      const restored = await w.api.post(`/tasks/${root.id}/tree/restore`, { reason: 'back' });
      expect(restored.status).toBe(200);
      expect(restored.body.hold).toMatchObject({ id: hold.id, released_reason: 'back' });
      for (const t of [root, working, moving, grand]) {
        const now = (await w.api.get(`/tasks/${t.id}`)).body;
        expect(now.status).toBe(before[t.id]);
        expect(now.cancelled_at).toBeNull();
      }
      expect(await statusOf(w.api, dead.id)).toBe('CANCELLED');
      await ws.waitFor((f) => f.action === 'task.state_changed' && f.payload.task?.id === moving.id && f.payload.to === 'BLOCKED');
      expect((await w.api.post(`/tasks/${root.id}/tree/restore`)).status).toBe(409);
    } finally {
      ws.close();
    }
  });
});

describe('seed scenario: cancel a tree of 5 with 2 active wakeups', () => {
  it('cancels all 5, cancels both wakeups (tree_cancelled), snapshots every status, and records a cancel hold', async () => {
    const { workspace_id, task: ceo } = await makeTask(w.api, { title: 'CEO' });
    const kids: { id: string }[] = [];
    for (const title of ['architect', 'frontend', 'backend', 'tests']) kids.push(await child(w.api, workspace_id, ceo.id, title));
    await w.api.ok('PATCH', `/tasks/${kids[1]!.id}`, { status: 'IN_PROGRESS' });
    // Scheduled for later, so they are still active when the cancel comes.
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const wakes = [
      await w.api.ok('POST', '/wakeups', { task_id: kids[0]!.id, reason: 'scheduled', run_at: later }),
      await w.api.ok('POST', '/wakeups', { task_id: kids[2]!.id, reason: 'task_comment', run_at: later }),
    ];
    const preview = await w.api.ok('POST', `/tasks/${ceo.id}/tree/preview`);
    expect(preview).toMatchObject({ task_count: 5, active_wakeup_count: 2, active_hold: null });
    const { hold } = await w.api.ok('POST', `/tasks/${ceo.id}/tree/cancel`);
    expect(hold).toMatchObject({ mode: 'cancel', root_task_id: ceo.id });
    expect(hold.members).toHaveLength(5);
    expect(hold.members.find((m: { task_id: string }) => m.task_id === kids[1]!.id).task_status).toBe('IN_PROGRESS');
    for (const t of [ceo, ...kids]) expect(await statusOf(w.api, t.id)).toBe('CANCELLED');
    for (const wk of wakes)
      expect((await w.api.get(`/wakeups/${wk.id}`)).body).toMatchObject({ status: 'cancelled', skip_reason: 'tree_cancelled', session_id: null });
    expect((await w.api.ok('POST', `/tasks/${ceo.id}/tree/preview`)).active_wakeup_count).toBe(0);
    await w.api.ok('POST', `/tasks/${ceo.id}/tree/restore`);
    expect(await statusOf(w.api, kids[1]!.id)).toBe('IN_PROGRESS');
  });
});

describe('cost summary', () => {
  it('sums the whole subtree, archived grandchild included, counting a duplicate usage_event_id once', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'root' });
    const c = await child(w.api, workspace_id, root.id, 'child');
    const g = await child(w.api, workspace_id, c.id, 'archived grandchild');
    await w.api.ok('PATCH', `/tasks/${g.id}`, { archived: true });
    const cost = (task_id: string, usage_event_id: string, cost_cents: number, tokens_in: number) =>
      w.api.post('/cost-events', { task_id, usage_event_id, model: 'm', cost_cents, tokens_in, tokens_cached_in: 10, tokens_out: 5 });
    const u = `u-${root.id}`;
    expect((await cost(root.id, `${u}-1`, 100, 1000)).status).toBe(201);
    expect((await cost(g.id, `${u}-2`, 250, 2000)).status).toBe(201);
    const dup = await cost(g.id, `${u}-2`, 250, 2000);
    expect(dup.status).toBe(200);
    expect(dup.body.duplicate).toBe(true);
    const summary = await w.api.ok('GET', `/tasks/${root.id}/tree/cost-summary`);
    expect(summary).toEqual({
      task_id: root.id,
      task_count: 2,
      include_descendants: true,
      cost_cents: 350,
      tokens_in: 3000,
      tokens_cached_in: 20,
      tokens_out: 10,
      unpriced_events: 0,
    });
    expect(await w.api.ok('GET', `/tasks/${c.id}/tree/cost-summary`)).toMatchObject({ task_count: 1, cost_cents: 250 });
    const other = await makeTask(w.api, { title: 'unrelated' });
    expect(await w.api.ok('GET', `/tasks/${other.task.id}/tree/cost-summary`)).toMatchObject({ task_count: 0, cost_cents: 0, tokens_in: 0 });
    // Another workspace's operator learns nothing.
    const { ApiClient } = await import('@kandev/testkit');
    const stranger = new ApiClient(w.stack.gatewayUrl, await w.stack.operatorToken([other.workspace_id]));
    expect([403, 404]).toContain((await stranger.get(`/tasks/${root.id}/tree/cost-summary`)).status);
    expect([403, 404]).toContain(
      (await stranger.post('/cost-events', { task_id: root.id, usage_event_id: `${u}-3`, cost_cents: 1, tokens_in: 1, tokens_cached_in: 0, tokens_out: 0 }))
        .status,
    );
  });

  it('turns an agent usage report into a cost event of its task', async () => {
    const { task } = await makeTask(w.api, { title: 'spender' });
    await w.api.ok('POST', `/tasks/${task.id}/sessions`, {
      prompt: JSON.stringify({ script: [{ usage: { cost_cents: 42, tokens_in: 7, tokens_cached_in: 1, tokens_out: 3 } }, { say: 'spent' }] }),
    });
    const summary = await eventually(async () => {
      const s = await w.api.ok('GET', `/tasks/${task.id}/tree/cost-summary`);
      return s.task_count === 1 ? s : null;
    }, 15_000);
    expect(summary).toMatchObject({ cost_cents: 42, tokens_in: 7, tokens_cached_in: 1, tokens_out: 3 });
  });
});

describe('races', () => {
  // Bounds from the operations: a launch in flight when the pause lands settles within lifecycle's
  // LAUNCH_TIMEOUT_MS (30 s) plus the teardown grace; 45 s leaves headroom on a loaded machine.
  const SETTLE_MS = 45_000;
  it('a wakeup dispatched concurrently with a pause is gated or its session stopped, never left running', { timeout: 4 * 2 * SETTLE_MS + 30_000 }, async () => {
    for (let i = 0; i < 4; i++) {
      const { workspace_id, task: root } = await makeTask(w.api, { title: `race ${i}` });
      const c = await child(w.api, workspace_id, root.id, 'child');
      const wake = await w.api.ok('POST', '/wakeups', { task_id: c.id, reason: 'race', payload: { prompt: sleepScript(60_000) } });
      if (i % 2) await new Promise((r) => setImmediate(r));
      const paused = await w.api.post(`/tasks/${root.id}/tree/pause`);
      expect(paused.status).toBe(200);
      const final = await eventually(async () => {
        const x = (await w.api.get(`/wakeups/${wake.id}`)).body;
        return x.status === 'finished' || x.status === 'cancelled' ? x : null;
      }, SETTLE_MS);
      const sessions = (await w.api.get(`/tasks/${c.id}`)).body.sessions as Array<{ id: string; state: string }>;
      if (final.skip_reason === 'tree_paused') expect(sessions.every((s) => s.state === 'CANCELLED' || s.state === 'FAILED')).toBe(true);
      // Whatever won, nothing of the child runs once the launch settles.
      await eventually(async () => (await w.api.get(`/tasks/${c.id}/executions`)).body.length === 0, SETTLE_MS);
      const after = (await w.api.get(`/tasks/${c.id}`)).body.sessions as Array<{ state: string }>;
      expect(after.every((s) => s.state === 'CANCELLED' || s.state === 'FAILED')).toBe(true);
    }
  });
});
