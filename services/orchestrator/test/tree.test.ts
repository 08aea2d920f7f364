import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Budget, Holds, KandevError, Orch, OrchTree, type Hold } from '@kandev/contracts';
import { createLogger, on, request, serveEndpoints } from '@kandev/runtime';
import { eventually } from '@kandev/testkit';
import { operator, startHarness, type Harness } from './harness.js';

/**
 * Tree holds in the orchestrator (R-4, B-1), with the lifecycle and the holds service faked at
 * the subject level: membership under concurrent child creation, holds racing holds, snapshots,
 * the wakeup launch gate, and what a hold tells the holds service.
 */
let h: Harness;
const applied: Hold[] = [];
const released: Hold[] = [];
beforeAll(async () => {
  h = await startHarness();
  await serveEndpoints(h.nc, { service: 'holds', instanceId: 'holds-fake', queue: 'holds', log: createLogger('fake-holds', 'silent') }, [
    on(Holds.wakeupCount, async (req) => ({ count: req.task_ids.length > 1 ? 3 : 0 })),
    on(Holds.holdApplied, async (req) => {
      applied.push(req.hold);
      return { cancelled_wakeups: 0 };
    }),
    // A resume asks for the tree's budget (B-8): none in these trees.
    on(Budget.ofRoot, async () => ({ budget: null })),
    on(Holds.holdReleased, async (req) => {
      released.push(req.hold);
      return { released: true };
    }),
  ]);
});
afterAll(async () => h?.stop());

const tree = (endpoint: keyof typeof OrchTree, task_id: string, reason?: string) =>
  request(h.nc, OrchTree[endpoint] as typeof OrchTree.pause, { actor: operator, task_id, ...(reason ? { reason } : {}) });

async function family(children = 2) {
  const ws = await h.workspace();
  const root = await h.task(ws.id, 'root');
  const kids = [];
  for (let i = 0; i < children; i++) kids.push(await h.task(ws.id, `kid ${i}`, root.id));
  return { ws, root, kids };
}

describe('holds', () => {
  it('pauses: hold and members recorded, fences bumped, active sessions cancelled without REVIEW, statuses kept, the holds service told', async () => {
    const { root, kids } = await family();
    const s = await h.startSession(kids[0]!.id, 'work');
    const [before] = await h.sql`SELECT fence_epoch::int AS e FROM orchestrator.tasks WHERE id = ${kids[1]!.id}`;
    const { hold } = await tree('pause', root.id, 'why');
    expect(hold).toMatchObject({ mode: 'pause', root_task_id: root.id, reason: 'why', released_at: null });
    expect(hold.members.map((m) => [m.task_id, m.depth, m.task_status])).toEqual([
      [root.id, 0, 'TODO'],
      ...[kids[0]!.id, kids[1]!.id].sort().map((id) => [id, 1, id === kids[0]!.id ? 'IN_PROGRESS' : 'TODO']),
    ]);
    const [after] = await h.sql`SELECT fence_epoch::int AS e FROM orchestrator.tasks WHERE id = ${kids[1]!.id}`;
    expect(after!.e).toBe(before!.e + 1);
    const t = await h.getTask(kids[0]!.id);
    expect(t.status).toBe('IN_PROGRESS');
    expect(t.sessions[0]).toMatchObject({ id: s.id, state: 'CANCELLED' });
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    expect(h.life.stops).toContainEqual(expect.objectContaining({ execution_id: exec.execution_id, reason: 'tree_paused' }));
    expect(applied.map((x) => x.id)).toContain(hold.id);
    const [cancelReason] = await h.sql`SELECT cancel_reason FROM orchestrator.sessions WHERE id = ${s.id}`;
    expect(cancelReason).toEqual({ cancel_reason: 'tree_paused' });
    await tree('resume', root.id);
    expect(released.map((x) => x.id)).toContain(hold.id);
  });

  it('previews without changing anything', async () => {
    const { root, kids } = await family();
    const before =
      await h.sql`SELECT id, status, updated_at, fence_epoch FROM orchestrator.tasks WHERE id = ANY(${[root.id, ...kids.map((k) => k.id)]}) ORDER BY id`;
    const p = await request(h.nc, OrchTree.preview, { actor: operator, task_id: root.id });
    expect(p).toMatchObject({ task_count: 3, active_wakeup_count: 3, active_hold: null });
    const after =
      await h.sql`SELECT id, status, updated_at, fence_epoch FROM orchestrator.tasks WHERE id = ANY(${[root.id, ...kids.map((k) => k.id)]}) ORDER BY id`;
    expect(after).toEqual(before);
  });

  it('cancels and restores: clears execution locks, snapshots at the instant of cancel, skips members already cancelled, audits every member', async () => {
    const { root, kids } = await family(3);
    await h.sql`UPDATE orchestrator.tasks SET checkout_agent_id = 'agent-7', checkout_at = now() WHERE id = ${kids[0]!.id}`;
    await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: kids[1]!.id, status: 'CANCELLED' });
    await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: kids[2]!.id, status: 'BLOCKED' });
    const { hold } = await tree('cancel', root.id);
    const m = new Map(hold.members.map((x) => [x.task_id, x]));
    expect(m.get(kids[1]!.id)).toMatchObject({ task_status: 'CANCELLED', skip_reason: 'already_cancelled' });
    expect(m.get(kids[2]!.id)).toMatchObject({ task_status: 'BLOCKED', skip_reason: null });
    const rows =
      await h.sql`SELECT id, status, cancelled_at, checkout_agent_id, checkout_at FROM orchestrator.tasks WHERE id = ANY(${[root.id, ...kids.map((k) => k.id)]})`;
    for (const r of rows) expect(r).toMatchObject({ status: 'CANCELLED', checkout_agent_id: null, checkout_at: null, cancelled_at: expect.anything() });
    const events =
      await h.sql`SELECT payload->'data'->>'from' AS "from" FROM orchestrator.outbox WHERE payload->>'type' = 'task.state_changed' AND payload->>'task_id' = ${kids[2]!.id} AND payload->'data'->>'to' = 'CANCELLED'`;
    expect(events).toEqual([{ from: 'BLOCKED' }]);
    const audit = await request(h.nc, Orch.taskAudit, { actor: operator, task_id: kids[2]!.id });
    expect(audit[0]).toMatchObject({ action: 'tree.cancel', outcome: 'held', details: expect.objectContaining({ hold_id: hold.id, task_status: 'BLOCKED' }) });
    // A held task refuses launches (B-1).
    await expect(h.startSession(kids[2]!.id, 'x')).rejects.toMatchObject({ code: 'CONFLICT', details: { hold_mode: 'cancel', hold_id: hold.id } });
    await expect(tree('resume', root.id)).rejects.toMatchObject({ code: 'CONFLICT', details: { active_hold_id: hold.id, active_hold_mode: 'cancel' } });

    const restored = await tree('restore', root.id, 'undo');
    expect(restored.hold).toMatchObject({ id: hold.id, released_reason: 'undo', released_by: 'operator:op-1' });
    const back = new Map(
      (await h.sql`SELECT id, status, cancelled_at FROM orchestrator.tasks WHERE id = ANY(${[root.id, ...kids.map((k) => k.id)]})`).map((r) => [r.id, r]),
    );
    expect(back.get(root.id)).toMatchObject({ status: 'TODO', cancelled_at: null });
    expect(back.get(kids[0]!.id)).toMatchObject({ status: 'TODO', cancelled_at: null });
    expect(back.get(kids[1]!.id)!.status).toBe('CANCELLED');
    expect(back.get(kids[2]!.id)).toMatchObject({ status: 'BLOCKED', cancelled_at: null });
    await expect(tree('restore', root.id)).rejects.toMatchObject({ code: 'CONFLICT' });
  });

  it('refuses an operator without access to the workspace before anything changes', async () => {
    const { root } = await family(1);
    const stranger = { ...operator, workspaces: [randomUUID()] };
    await expect(request(h.nc, OrchTree.pause, { actor: stranger, task_id: root.id })).rejects.toMatchObject({ code: 'FORBIDDEN' });
    const [n] = await h.sql`SELECT count(*)::int AS n FROM orchestrator.tree_holds WHERE root_task_id = ${root.id}`;
    expect(n!.n).toBe(0);
  });
});

describe('failures are audited on the root (B-3)', () => {
  const auditOf = (taskId: string) =>
    h.sql`SELECT action, outcome, details FROM orchestrator.audit_log WHERE task_id = ${taskId} AND action LIKE 'tree.%' ORDER BY created_at, id`;

  it('a pause whose writes fail changes nothing, answers INTERNAL_ERROR and records the failure', async () => {
    const { root, kids } = await family(1);
    const s = await h.startSession(kids[0]!.id, 'work');
    await h.sql.unsafe(
      `CREATE OR REPLACE FUNCTION orchestrator.refuse_hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hold refused for this test'; END $$`,
    );
    await h.sql.unsafe(
      `CREATE TRIGGER refuse_hold BEFORE INSERT ON orchestrator.tree_holds FOR EACH ROW WHEN (NEW.root_task_id = '${root.id}') EXECUTE FUNCTION orchestrator.refuse_hold()`,
    );
    try {
      const err = await tree('pause', root.id, 'refused').catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'INTERNAL_ERROR' });
    } finally {
      await h.sql.unsafe(`DROP TRIGGER refuse_hold ON orchestrator.tree_holds`);
    }
    expect(await h.sql`SELECT id FROM orchestrator.tree_holds WHERE root_task_id = ${root.id}`).toHaveLength(0);
    expect((await h.getTask(kids[0]!.id)).sessions[0]).toMatchObject({ id: s.id, state: 'RUNNING' });
    expect(await auditOf(root.id)).toEqual([{ action: 'tree.pause', outcome: 'error:INTERNAL_ERROR', details: { stage: 'accept' } }]);
    expect(await auditOf(kids[0]!.id)).toEqual([]);
  });

  it('sends the teardowns of several live sessions to their owner in one stop_many, and records each one it fails', async () => {
    const { root, kids } = await family(3);
    const sessions = [];
    for (const k of kids) sessions.push(await h.startSession(k.id, 'work'));
    const execs = sessions.map((s) => [...h.life.registry.values()].find((e) => e.session_id === s.id)!.execution_id);
    const requestsBefore = h.life.stopManyRequests.length;
    await tree('pause', root.id, 'many');
    const sent = h.life.stopManyRequests.slice(requestsBefore);
    expect(sent).toHaveLength(1);
    expect([...sent[0]!].sort()).toEqual([...execs].sort());
    for (const id of execs) expect(h.life.stops).toContainEqual(expect.objectContaining({ execution_id: id, reason: 'tree_paused' }));
    await tree('resume', root.id);

    // The owner takes the request and refuses each stop in it: every one is named as failed.
    const again = [];
    for (const k of kids) again.push(await h.startSession(k.id, 'again'));
    const execsAgain = again.map((s) => [...h.life.registry.values()].find((e) => e.session_id === s.id)!.execution_id);
    h.life.stopFails = new KandevError('INTERNAL_ERROR', 'teardown refused for this test');
    try {
      const { hold } = await tree('pause', root.id, 'owner fails');
      const rows = await eventually(async () => {
        const r = (await auditOf(root.id)).filter((x) => x.outcome === 'error:INTERNAL_ERROR');
        return r.length >= 1 ? r : null;
      }, 10_000);
      expect(rows).toEqual([
        { action: 'tree.pause', outcome: 'error:INTERNAL_ERROR', details: { stage: 'teardown', failed: expect.any(Array), hold_id: hold.id } },
      ]);
      // Each refused stop is named (the first sessions' executions, still listed by this fake owner, are
      // halted with the hold too: planTreeStop includes a member's orphans).
      expect((rows[0]!.details as { failed: string[] }).failed).toEqual(expect.arrayContaining(execsAgain));
      await tree('resume', root.id);
    } finally {
      h.life.stopFails = null;
    }
  });

  it('a teardown its owner fails leaves the hold in force and records which execution failed', async () => {
    const { root, kids } = await family(1);
    const s = await h.startSession(kids[0]!.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    h.life.stopFails = new KandevError('INTERNAL_ERROR', 'teardown refused for this test');
    try {
      const { hold } = await tree('pause', root.id, 'owner fails');
      expect(hold.released_at).toBeNull();
      expect((await h.getTask(kids[0]!.id)).sessions[0]).toMatchObject({ id: s.id, state: 'CANCELLED' });
      // The answer waits for the teardowns up to 1 s; on a loaded machine the failure's row may come just after it.
      const rows = await eventually(async () => {
        const r = await auditOf(root.id);
        return r.length >= 2 ? r : null;
      }, 10_000);
      expect(rows).toEqual([
        expect.objectContaining({ action: 'tree.pause', outcome: 'held' }),
        { action: 'tree.pause', outcome: 'error:INTERNAL_ERROR', details: { stage: 'teardown', failed: [exec.execution_id], hold_id: hold.id } },
      ]);
      await tree('resume', root.id);
    } finally {
      h.life.stopFails = null;
    }
  });
});

describe('races', () => {
  it('two holds over overlapping trees at once: exactly one wins, the other is CONFLICT (10 rounds)', async () => {
    for (let i = 0; i < 10; i++) {
      const { root, kids } = await family(1);
      const results = await Promise.allSettled([tree('pause', root.id), tree(i % 2 ? 'cancel' : 'pause', kids[0]!.id)]);
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      const rejected = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      expect(rejected.reason).toMatchObject({ code: 'CONFLICT' });
      const [active] = await h.sql`SELECT count(*)::int AS n FROM orchestrator.tree_hold_members WHERE task_id = ${kids[0]!.id} AND active`;
      expect(active!.n).toBe(1);
    }
  });

  it('misses no child that exists when the hold is taken, while children are being created concurrently', async () => {
    const { ws, root } = await family(0);
    const mid = await h.task(ws.id, 'mid', root.id);
    const confirmed: string[] = [];
    let stop = false;
    const creator = (async () => {
      for (let i = 0; !stop && i < 200; i++) {
        const t = await h.task(ws.id, `c${i}`, i % 2 ? mid.id : root.id);
        confirmed.push(t.id);
      }
    })();
    while (confirmed.length < 5) await new Promise((r) => setImmediate(r));
    const snapshot = [...confirmed];
    const { hold } = await tree('pause', root.id);
    stop = true;
    await creator;
    const members = new Set(hold.members.map((m) => m.task_id));
    for (const id of [root.id, mid.id, ...snapshot]) expect(members.has(id)).toBe(true);
    // Every member is a real descendant; every task created later is no member.
    const all =
      await h.sql`WITH RECURSIVE t AS (SELECT id FROM orchestrator.tasks WHERE id = ${root.id} UNION ALL SELECT c.id FROM orchestrator.tasks c JOIN t ON c.parent_id = t.id) SELECT id FROM t`;
    const ids = new Set(all.map((r) => r.id as string));
    for (const id of members) expect(ids.has(id)).toBe(true);
    await tree('resume', root.id);
  });

  it('a restore racing a new hold on the same tree does not deadlock', async () => {
    for (let i = 0; i < 5; i++) {
      const { root } = await family(2);
      await tree('cancel', root.id);
      const results = await Promise.allSettled([tree('restore', root.id), tree('pause', root.id)]);
      expect(results[0]!.status).toBe('fulfilled');
      if (results[1]!.status === 'rejected') expect(results[1].reason).toMatchObject({ code: 'CONFLICT' });
      else await tree('resume', root.id);
    }
  });
  it('a parent stop or an operator task stop racing a pause of the same tree does not deadlock, and the session ends CANCELLED', async () => {
    for (let i = 0; i < 6; i++) {
      const { root, kids } = await family(1);
      const s = await h.startSession(kids[0]!.id, 'work');
      const stop = i % 2 ? h.stopChild(root.id, kids[0]!.id) : request(h.nc, Orch.taskStop, { actor: operator, task_id: kids[0]!.id });
      const results = await Promise.allSettled([stop, tree('pause', root.id)]);
      for (const r of results) expect(r.status).toBe('fulfilled');
      expect((await h.getTask(kids[0]!.id)).sessions.find((x) => x.id === s.id)!.state).toBe('CANCELLED');
      await tree('resume', root.id);
    }
  });
});

describe('wakeup launches', () => {
  it('are keyed by wakeup id and refused for a held task', async () => {
    const { root, kids } = await family(1);
    const wakeup_id = randomUUID();
    const first = await request(h.nc, OrchTree.wakeupLaunch, { wakeup_id, task_id: kids[0]!.id, prompt: 'do it' });
    const again = await request(h.nc, OrchTree.wakeupLaunch, { wakeup_id, task_id: kids[0]!.id, prompt: 'do it' });
    expect(first).toMatchObject({ launched: true });
    expect(again).toEqual(first);
    expect((await h.getTask(kids[0]!.id)).sessions).toHaveLength(1);
    await tree('pause', root.id);
    expect(await request(h.nc, OrchTree.wakeupLaunch, { wakeup_id: randomUUID(), task_id: kids[0]!.id })).toMatchObject({
      launched: false,
      hold_mode: 'pause',
    });
  });
});
