import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OrchMcp } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { TaskRegistryView } from '../src/flows/registry-view.js';
import type { OrchRuntime } from '../src/flows/context.js';
import { agentToken, startHarness, type Harness } from './harness.js';

/** R-1 stop_task_kandev against a real orchestrator, real NATS and PostgreSQL; lifecycle faked at the subject level. */
describe('orch.mcp.stop_child_task', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => h?.stop());

  async function family() {
    const ws = await h.workspace();
    const other = await h.workspace('other');
    const grand = await h.task(ws.id, 'grandparent');
    const parent = await h.task(ws.id, 'parent', grand.id);
    const child = await h.task(ws.id, 'child', parent.id);
    const sibling = await h.task(ws.id, 'sibling', parent.id);
    const unrelated = await h.task(ws.id, 'unrelated');
    const foreign = await h.task(other.id, 'foreign');
    return { ws, grand, parent, child, sibling, unrelated, foreign };
  }

  it('lets the direct parent stop a live child: session CANCELLED, task REVIEW, teardown of the captured execution', async () => {
    const f = await family();
    const session = await h.startSession(f.child.id, 'work');
    const before = await h.getTask(f.child.id);
    expect(before.status).toBe('IN_PROGRESS');
    const res = await h.stopChild(f.parent.id, f.child.id);
    expect(res).toEqual({ task_id: f.child.id, status: 'stopped' });
    const after = await h.getTask(f.child.id);
    expect(after.status).toBe('REVIEW');
    expect(after.sessions[0]).toMatchObject({ id: session.id, state: 'CANCELLED' });
    const exec = [...h.life.registry.values()].find((e) => e.session_id === session.id)!;
    expect(await h.teardownsOf([exec.execution_id])).toHaveLength(1);
    // No prompt was sent by the stop (only the launch prompt exists).
    expect(h.life.prompts.filter((p) => p.execution_id === exec.execution_id)).toHaveLength(1);
    const [row] = await h.sql`SELECT cancel_reason, error_message FROM orchestrator.sessions WHERE id = ${session.id}`;
    expect(row).toEqual({ cancel_reason: 'stopped_by_parent_task', error_message: null });
  });

  it('stages events that carry exactly the rows the stop wrote (session CANCELLED, task REVIEW)', async () => {
    const f = await family();
    const session = await h.startSession(f.child.id, 'work');
    await h.stopChild(f.parent.id, f.child.id);
    // The event carries the task row; `hold` is what the read adds to it (GET /tasks/:id).
    const { sessions, hold, ...task } = await h.getTask(f.child.id);
    expect(hold).toBeNull();
    const events = await h.sql<{ payload: { type: string; data: Record<string, unknown> } }[]>`
      SELECT payload FROM orchestrator.outbox WHERE payload->>'task_id' = ${f.child.id} AND payload->'data'->>'reason' = 'stopped_by_parent_task' OR (payload->>'task_id' = ${f.child.id} AND payload->'data'->>'reason' = 'stopped')`;
    const sessionEvent = events.find((e) => e.payload.type === 'session.state_changed')!;
    const taskEvent = events.find((e) => e.payload.type === 'task.state_changed')!;
    expect(sessionEvent.payload.data).toMatchObject({ from: 'RUNNING', to: 'CANCELLED', session: sessions.find((s) => s.id === session.id) });
    expect(taskEvent.payload.data).toMatchObject({ from: 'IN_PROGRESS', to: 'REVIEW', task });
  });

  it('writes the stop and its audit row in one transaction', async () => {
    const f = await family();
    const session = await h.startSession(f.child.id, 'work');
    await h.stopChild(f.parent.id, f.child.id);
    // xmin: the transaction that wrote each row version. (REVIEW is written in a subtransaction of
    // its own, and the events' rows are updated again once published, so they carry other ids.)
    const rows = await h.sql<{ what: string; xmin: string }[]>`
      SELECT 'session' AS what, xmin::text FROM orchestrator.sessions WHERE id = ${session.id}
      UNION ALL SELECT 'turn', xmin::text FROM orchestrator.turns WHERE session_id = ${session.id}
      UNION ALL SELECT 'audit', xmin::text FROM orchestrator.audit_log WHERE task_id = ${f.child.id} AND action = 'mcp.stop_task'`;
    expect(rows.map((r) => r.what).sort()).toEqual(['audit', 'session', 'turn']);
    expect(new Set(rows.map((r) => r.xmin)).size).toBe(1);
  });

  it('answers not_running on a repeat, changing nothing (same updated_at)', async () => {
    const f = await family();
    const session = await h.startSession(f.child.id, 'work');
    await h.stopChild(f.parent.id, f.child.id);
    await h.teardownsOf([...h.life.registry.values()].filter((e) => e.session_id === session.id).map((e) => e.execution_id));
    const t1 = await h.getTask(f.child.id);
    const stopsBefore = h.life.stops.length;
    expect(await h.stopChild(f.parent.id, f.child.id)).toEqual({ task_id: f.child.id, status: 'not_running' });
    const t2 = await h.getTask(f.child.id);
    expect(t2.updated_at).toBe(t1.updated_at);
    expect(t2.sessions.map((s) => s.updated_at)).toEqual(t1.sessions.map((s) => s.updated_at));
    expect(h.life.stops.length).toBe(stopsBefore);
  });

  it.each([
    ['self', (f: Awaited<ReturnType<typeof family>>) => [f.child.id, f.child.id]],
    ['sibling', (f: Awaited<ReturnType<typeof family>>) => [f.sibling.id, f.child.id]],
    ['child to parent', (f: Awaited<ReturnType<typeof family>>) => [f.child.id, f.parent.id]],
    ['grandparent', (f: Awaited<ReturnType<typeof family>>) => [f.grand.id, f.child.id]],
    ['unrelated', (f: Awaited<ReturnType<typeof family>>) => [f.unrelated.id, f.child.id]],
    ['cross-workspace', (f: Awaited<ReturnType<typeof family>>) => [f.foreign.id, f.child.id]],
  ])('refuses a %s caller with FORBIDDEN and changes nothing', async (_name, pick) => {
    const f = await family();
    await h.startSession(f.child.id, 'work');
    await h.startSession(f.parent.id, 'work');
    const [caller, target] = pick(f) as [string, string];
    const fence = async () => (await h.sql`SELECT fence_epoch FROM orchestrator.tasks WHERE id = ${target}`)[0]!.fence_epoch as string;
    const [before, fenceBefore] = [await h.getTask(target), await fence()];
    const stops = h.life.stops.length;
    await expect(h.stopChild(caller, target)).rejects.toMatchObject({ code: 'FORBIDDEN' });
    const after = await h.getTask(target);
    expect(after).toEqual(before);
    expect(await fence()).toBe(fenceBefore);
    expect(h.life.stops.length).toBe(stops);
  });

  it('refuses a caller that is not the parent without waiting for the locks a stop takes (it locks nothing)', async () => {
    const f = await family();
    await h.startSession(f.child.id, 'work');
    // Another transaction holds the child's row and its sessions' rows, as a stop or launch of the parent would.
    const held = await h.sql.reserve();
    try {
      await held`BEGIN`;
      await held`SELECT id FROM orchestrator.tasks WHERE id = ${f.child.id} FOR NO KEY UPDATE`;
      await held`SELECT id FROM orchestrator.sessions WHERE task_id = ${f.child.id} FOR UPDATE`;
      // Answered while the locks are held: a statement that waited for them would end at the request's deadline instead.
      await expect(h.stopChild(f.sibling.id, f.child.id)).rejects.toMatchObject({ code: 'FORBIDDEN' });
    } finally {
      await held`ROLLBACK`;
      held.release();
    }
  });

  it('validates before anything else: missing task_id → VALIDATION_ERROR, unknown tasks → NOT_FOUND', async () => {
    const f = await family();
    const raw = await h.nc.request(OrchMcp.stopChildTask.subject, new TextEncoder().encode(JSON.stringify({ caller_task_id: f.parent.id })), { timeout: 2000 });
    expect(JSON.parse(new TextDecoder().decode(raw.data)).error.code).toBe('VALIDATION_ERROR');
    const missing = '00000000-0000-4000-8000-00000000dead';
    await expect(h.stopChild(missing, f.child.id)).rejects.toMatchObject({ code: 'NOT_FOUND' });
    await expect(h.stopChild(f.parent.id, missing)).rejects.toMatchObject({ code: 'NOT_FOUND' });
    const bad = await h.nc.request(OrchMcp.stopChildTask.subject, new TextEncoder().encode('{'), { timeout: 2000 });
    expect(JSON.parse(new TextDecoder().decode(bad.data)).error.code).toBe('BAD_REQUEST');
  });

  it('ignores unknown arguments such as reason, force and sender_task_id', async () => {
    const f = await family();
    await h.startSession(f.child.id, 'work');
    const payload = {
      caller_task_id: f.parent.id,
      agent_token: await agentToken(f.parent.id),
      task_id: f.child.id,
      reason: 'rm -rf',
      force: true,
      sender_task_id: f.grand.id,
    };
    const res = await request(h.nc, OrchMcp.stopChildTask, payload as never);
    expect(res.status).toBe('stopped');
    const [row] = await h.sql`SELECT cancel_reason FROM orchestrator.sessions WHERE task_id = ${f.child.id}`;
    expect(row!.cancel_reason).toBe('stopped_by_parent_task');
  });

  it('stops every live session, including non-primary ones', async () => {
    const f = await family();
    const a = await h.startSession(f.child.id, 'one');
    const b = await h.startSession(f.child.id, 'two');
    expect(await h.stopChild(f.parent.id, f.child.id)).toMatchObject({ status: 'stopped' });
    const t = await h.getTask(f.child.id);
    expect(t.sessions.map((s) => [s.id, s.state, s.is_primary])).toEqual([
      [a.id, 'CANCELLED', true],
      [b.id, 'CANCELLED', false],
    ]);
    const ids = [...h.life.registry.values()]
      .filter((e) => e.task_id === f.child.id)
      .map((e) => e.execution_id)
      .sort();
    expect((await h.teardownsOf(ids)).map((s) => s.execution_id).sort()).toEqual(ids);
  });

  it('keeps office, archived and COMPLETED tasks in their status', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const office = await h.task(ws.id, 'office child', parent.id, { office: true });
    await h.startSession(office.id, 'work');
    await h.stopChild(parent.id, office.id);
    expect((await h.getTask(office.id)).status).toBe('IN_PROGRESS');

    const done = await h.task(ws.id, 'completed child', parent.id);
    await h.startSession(done.id, 'work');
    await h.sql`UPDATE orchestrator.tasks SET status = 'COMPLETED' WHERE id = ${done.id}`;
    expect((await h.stopChild(parent.id, done.id)).status).toBe('stopped');
    expect((await h.getTask(done.id)).status).toBe('COMPLETED');

    const archived = await h.task(ws.id, 'archived child', parent.id);
    await h.startSession(archived.id, 'work');
    await h.sql`UPDATE orchestrator.tasks SET archived_at = now() WHERE id = ${archived.id}`;
    expect((await h.stopChild(parent.id, archived.id)).status).toBe('stopped');
    expect((await h.getTask(archived.id)).status).toBe('IN_PROGRESS');
  });

  it('leaves queued messages stored and descendants untouched', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const grandchild = await h.task(ws.id, 'grandchild', child.id);
    await h.startSession(child.id, 'busy');
    const gs = await h.startSession(grandchild.id, 'busy too');
    expect((await h.message(parent.id, child.id, 'later')).status).toBe('queued');
    await h.stopChild(parent.id, child.id);
    const [q] = await h.sql`SELECT count(*)::int AS n FROM orchestrator.queued_messages WHERE task_id = ${child.id}`;
    expect(q!.n).toBe(1);
    const g = await h.getTask(grandchild.id);
    expect(g.status).toBe('IN_PROGRESS');
    expect(g.sessions[0]).toMatchObject({ id: gs.id, state: 'RUNNING' });
  });

  it('does not count a RUNNING session whose execution is gone as live, and leaves its row to the reconciler (R-10.3)', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const s = await h.startSession(child.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    await h.life.forget(exec.execution_id);
    const before = await h.getTask(child.id);
    expect(await h.stopChild(parent.id, child.id)).toEqual({ task_id: child.id, status: 'not_running' });
    // not_running changes nothing: same rows, same updated_at.
    expect(await h.getTask(child.id)).toEqual(before);
  });

  it('sweeps nothing when nothing is live: an execution the registry lost is the reconciler’s, the answer is not_running, audited', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const s = await h.startSession(child.id, 'work');
    const exec = [...h.life.registry.values()].find((e) => e.session_id === s.id)!;
    await h.life.lapse(exec.execution_id);
    const before = await h.getTask(child.id);
    const stops = h.life.stops.length;
    expect(await h.stopChild(parent.id, child.id)).toEqual({ task_id: child.id, status: 'not_running' });
    expect(await h.getTask(child.id)).toEqual(before);
    expect(h.life.stops.length).toBe(stops);
    expect(h.life.registry.get(exec.execution_id)?.status).toBe('RUNNING');
    const [audit] = await h.sql`SELECT outcome FROM orchestrator.audit_log WHERE task_id = ${child.id} AND action = 'mcp.stop_task'`;
    expect(audit).toEqual({ outcome: 'not_running' });
  });

  it('cancels the live session, reconciles the gone one, and moves the task to REVIEW: nothing of it works any more', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const live = await h.startSession(child.id, 'one');
    const gone = await h.startSession(child.id, 'two');
    await h.life.forget([...h.life.registry.values()].find((e) => e.session_id === gone.id)!.execution_id);
    expect(await h.stopChild(parent.id, child.id)).toEqual({ task_id: child.id, status: 'stopped' });
    const t = await h.getTask(child.id);
    expect(t.status).toBe('REVIEW');
    expect(Object.fromEntries(t.sessions.map((s) => [s.id, s.state]))).toEqual({ [live.id]: 'CANCELLED', [gone.id]: 'FAILED' });
  });

  it('keeps the stop when the REVIEW transition fails: stopped, session CANCELLED, teardown sent, the task keeps its status', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const session = await h.startSession(child.id, 'work');
    // A database that refuses this one task's move to REVIEW (R-1.4: the failure must not undo the stop).
    await h.sql.unsafe(`
      CREATE FUNCTION orchestrator.refuse_review() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.status = 'REVIEW' AND NEW.id = '${child.id}' THEN RAISE EXCEPTION 'review refused for this test'; END IF; RETURN NEW; END $$;
      CREATE TRIGGER refuse_review BEFORE UPDATE ON orchestrator.tasks FOR EACH ROW EXECUTE FUNCTION orchestrator.refuse_review();`);
    try {
      expect(await h.stopChild(parent.id, child.id)).toEqual({ task_id: child.id, status: 'stopped' });
    } finally {
      await h.sql.unsafe('DROP TRIGGER refuse_review ON orchestrator.tasks; DROP FUNCTION orchestrator.refuse_review()');
    }
    const t = await h.getTask(child.id);
    expect(t.status).toBe('IN_PROGRESS');
    expect(t.sessions[0]).toMatchObject({ id: session.id, state: 'CANCELLED' });
    const exec = [...h.life.registry.values()].find((e) => e.session_id === session.id)!;
    expect(await h.teardownsOf([exec.execution_id])).toHaveLength(1);
    const [row] = await h.sql`SELECT outcome FROM orchestrator.audit_log WHERE task_id = ${child.id} AND action = 'mcp.stop_task'`;
    expect(row).toEqual({ outcome: 'stopped' });
  });

  it('reads the execution a locked session names even when the listing at arrival did not see it (a launch admitted in between)', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const s1 = await h.startSession(child.id, 'one');
    const e1 = [...h.life.registry.values()].find((e) => e.session_id === s1.id)!;
    const view = new TaskRegistryView((h.svc.runtime as OrchRuntime).registry, child.id);
    // The listing (started with the view) has finished, naming e1 only; then e2 is launched.
    expect((await view.executionsOf([{ execution_id: e1.execution_id }])).map((e) => e.execution_id)).toEqual([e1.execution_id]);
    const s2 = await h.startSession(child.id, 'two');
    const e2 = [...h.life.registry.values()].find((e) => e.session_id === s2.id)!;
    const found = await view.executionsOf([{ execution_id: e1.execution_id }, { execution_id: e2.execution_id }]);
    expect(found.map((e) => e.execution_id).sort()).toEqual([e1.execution_id, e2.execution_id].sort());
    // A task stop's view: the whole listing (e1, and orphans if any) with e2 read by its key, once each.
    const every = await view.everyExecution([{ execution_id: e2.execution_id }, { execution_id: null }]);
    expect(every.map((e) => e.execution_id).sort()).toEqual([e1.execution_id, e2.execution_id].sort());
  });

  it('answers INTERNAL_ERROR, never not_running, when the registry lookup fails', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    await h.startSession(child.id, 'work');
    await h.life.failRegistry(true);
    try {
      await expect(h.stopChild(parent.id, child.id)).rejects.toMatchObject({ code: 'INTERNAL_ERROR' });
    } finally {
      await h.life.failRegistry(false);
    }
    expect((await h.getTask(child.id)).sessions[0]!.state).toBe('RUNNING');
    expect((await h.stopChild(parent.id, child.id)).status).toBe('stopped');
  });

  it('answers not_running for a child with nothing active even while the registry cannot be read: it never waits for the listing', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    await h.life.failRegistry(true);
    try {
      expect(await h.stopChild(parent.id, child.id)).toEqual({ task_id: child.id, status: 'not_running' });
    } finally {
      await h.life.failRegistry(false);
    }
  });

  it('records the stop in the audit log with actor and request id', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    await h.startSession(child.id, 'work');
    await request(
      h.nc,
      OrchMcp.stopChildTask,
      { caller_task_id: parent.id, agent_token: await agentToken(parent.id), task_id: child.id },
      { requestId: 'req-audit-1' },
    );
    const [row] = await h.sql`SELECT action, actor, request_id, outcome FROM orchestrator.audit_log WHERE task_id = ${child.id}`;
    expect(row).toEqual({ action: 'mcp.stop_task', actor: `agent:${parent.id}`, request_id: 'req-audit-1', outcome: 'stopped' });
  });
});
