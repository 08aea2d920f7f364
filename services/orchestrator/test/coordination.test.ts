import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { KandevError, Orch, OrchMcpClarification, OrchMcpCoord, type Task } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { agentToken, operator, startHarness, type Harness } from './harness.js';

/** The KandevError a request fails with (its code and details), or null when it succeeded. */
async function failure(p: Promise<unknown>): Promise<KandevError | null> {
  try {
    await p;
    return null;
  } catch (e) {
    if (e instanceof KandevError) return e;
    throw e;
  }
}

const list = async (h: Harness, caller: string) => request(h.nc, OrchMcpCoord.listChildren, { caller_task_id: caller, agent_token: await agentToken(caller) });
const conversation = async (h: Harness, caller: string, task_id: string, page: { after_seq?: number; limit?: number } = {}) =>
  request(h.nc, OrchMcpCoord.childConversation, { caller_task_id: caller, agent_token: await agentToken(caller), task_id, ...page });
const spawn = async (h: Harness, caller: string, task_id: string, prompt?: string) =>
  request(h.nc, OrchMcpCoord.spawnSession, { caller_task_id: caller, agent_token: await agentToken(caller), task_id, ...(prompt ? { prompt } : {}) });

/** R-11.1 at the orchestrator (fake lifecycle): who may read and restart which task, paging, spawn's refusals. */
describe('coordination tools', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => h?.stop());

  /** grandparent → parent → {child, sibling}; a task in another workspace. */
  async function family() {
    const ws = await h.workspace();
    const grandparent = await h.task(ws.id, 'grandparent');
    const parent = await h.task(ws.id, 'parent', grandparent.id);
    const child = await h.task(ws.id, 'child', parent.id);
    const sibling = await h.task(ws.id, 'sibling', parent.id);
    const other = await h.task((await h.workspace('other')).id, 'elsewhere');
    return { ws, grandparent, parent, child, sibling, other };
  }

  it('list_tasks_kandev: the direct children, oldest first, with live session, hold and pending counts', async () => {
    const f = await family();
    const s = await h.startSession(f.child.id, 'work');
    await request(h.nc, OrchMcpClarification.ask, {
      caller_task_id: f.child.id,
      agent_token: await agentToken(f.child.id),
      questions: [
        { id: 'a', text: 'A?' },
        { id: 'b', text: 'B?' },
      ],
    }).catch(() => undefined); // the waiter answers later; the bundle is stored at once
    const res = await list(h, f.parent.id);
    expect(res.tasks.map((t) => t.id)).toEqual([f.child.id, f.sibling.id]);
    expect(res.tasks[0]).toMatchObject({
      title: 'child',
      status: 'IN_PROGRESS',
      session: { id: s.id },
      hold: null,
      pending_questions: 2,
      pending_permissions: 0,
    });
    expect(res.tasks[1]).toEqual({
      id: f.sibling.id,
      title: 'sibling',
      status: 'TODO',
      session: null,
      hold: null,
      pending_questions: 0,
      pending_permissions: 0,
    });
    // The grandparent sees only its own child; a leaf sees none; another workspace's task sees none of these.
    expect((await list(h, f.grandparent.id)).tasks.map((t) => t.id)).toEqual([f.parent.id]);
    expect((await list(h, f.child.id)).tasks).toEqual([]);
    expect((await list(h, f.other.id)).tasks).toEqual([]);
    await h.stopChild(f.parent.id, f.child.id);
  });

  it('get_task_conversation_kandev and spawn_session_kandev refuse self, sibling, grandparent, child-to-parent and another workspace with FORBIDDEN, reading and writing nothing', async () => {
    const f = await family();
    const before = await h.snapshot();
    for (const caller of [f.child.id, f.sibling.id, f.grandparent.id, f.other.id]) {
      expect((await failure(conversation(h, caller, f.child.id)))?.code, caller).toBe('FORBIDDEN');
      expect((await failure(spawn(h, caller, f.child.id, 'hijack')))?.code, caller).toBe('FORBIDDEN');
    }
    // child → parent
    expect((await failure(conversation(h, f.child.id, f.parent.id)))?.code).toBe('FORBIDDEN');
    expect((await failure(spawn(h, f.child.id, f.parent.id)))?.code).toBe('FORBIDDEN');
    expect(await h.snapshot()).toEqual(before);
    // Unknown target or caller: NOT_FOUND; a token of another task than the caller claims: UNAUTHORIZED.
    expect((await failure(conversation(h, f.parent.id, randomUUID())))?.code).toBe('NOT_FOUND');
    const forged = request(h.nc, OrchMcpCoord.spawnSession, { caller_task_id: f.parent.id, agent_token: await agentToken(f.sibling.id), task_id: f.child.id });
    expect((await failure(forged))?.code).toBe('UNAUTHORIZED');
    const config = request(h.nc, OrchMcpCoord.listChildren, { caller_task_id: f.parent.id, agent_token: await agentToken(f.parent.id, 'config') });
    expect((await failure(config))?.code).toBe('FORBIDDEN');
  });

  it('pages a long conversation by after_seq, within the byte bound, to the end', async () => {
    const f = await family();
    const s = await h.startSession(f.child.id, 'first prompt');
    // 300 more items, one of them larger than a page may carry.
    const big = 'é'.repeat(40_000); // 80,000 bytes
    await h.sql.begin(async (tx) => {
      for (let i = 0; i < 300; i++) {
        await tx`INSERT INTO orchestrator.transcript_items (session_id, seq, role, kind, text) VALUES (${s.id}, ${i + 100}, 'agent', 'agent_text', ${i === 150 ? big : `line ${i}`})`;
      }
    });
    const first = await conversation(h, f.parent.id, f.child.id);
    expect(first.session_id).toBe(s.id);
    expect(first.items).toHaveLength(50);
    expect(first.items[0]).toMatchObject({ role: 'user', kind: 'prompt', text: 'first prompt' });
    expect(Object.keys(first.items[0]!).sort()).toEqual(['created_at', 'kind', 'role', 'seq', 'text']);
    const seen = [...first.items];
    let next = first.next_seq;
    let pages = 1;
    while (next !== null) {
      const page = await conversation(h, f.parent.id, f.child.id, { after_seq: next, limit: 1_000 });
      expect(page.items.length).toBeLessThanOrEqual(200);
      expect(page.items.reduce((n, i) => n + Buffer.byteLength(i.text), 0)).toBeLessThanOrEqual(64 * 1024);
      seen.push(...page.items);
      next = page.next_seq;
      pages++;
    }
    expect(seen.map((i) => i.seq)).toEqual([1, ...Array.from({ length: 300 }, (_, i) => i + 100)]);
    const cut = seen.find((i) => i.seq === 250)!;
    expect(cut.truncated).toBe(true);
    expect(Buffer.byteLength(cut.text)).toBeLessThanOrEqual(64 * 1024);
    expect(cut.text).toMatch(/^é+$/);
    expect(pages).toBeGreaterThanOrEqual(4);
    // A child that never ran: no session, no items.
    expect(await conversation(h, f.parent.id, f.sibling.id)).toEqual({ task_id: f.sibling.id, session_id: null, items: [], next_seq: null });
    await h.stopChild(f.parent.id, f.child.id);
  });

  it('spawn_session_kandev starts a session on a stopped child through the operator start (task IN_PROGRESS, audited, sender recorded)', async () => {
    const f = await family();
    const first = await h.startSession(f.child.id, 'first');
    expect((await h.stopChild(f.parent.id, f.child.id)).status).toBe('stopped');
    const res = await spawn(h, f.parent.id, f.child.id, 'again');
    expect(res).toEqual({ task_id: f.child.id, session_id: expect.any(String), status: 'started' });
    expect(res.session_id).not.toBe(first.id);
    const t = await h.getTask(f.child.id);
    expect(t.status).toBe('IN_PROGRESS');
    expect(t.sessions.map((s) => s.state)).toEqual(['CANCELLED', 'RUNNING']);
    const audit = await request(h.nc, Orch.taskAudit, { actor: operator, task_id: f.child.id });
    expect(audit[0]).toMatchObject({ action: 'session.start', actor: `agent:${f.parent.id}`, details: { sender_task_id: f.parent.id } });
    // Its first prompt is in the new session's conversation.
    const conv = await conversation(h, f.parent.id, f.child.id);
    expect(conv.session_id).toBe(res.session_id);
    expect(conv.items.map((i) => i.text)).toContain('again');
    await h.stopChild(f.parent.id, f.child.id);
  });

  it('spawn_session_kandev refuses a child with a live session, a CANCELLED child and a held child with CONFLICT, launching nothing', async () => {
    const f = await family();
    const live = await h.startSession(f.child.id, 'busy');
    const launches = h.life.launches.length;
    const busy = await failure(spawn(h, f.parent.id, f.child.id, 'second'));
    expect(busy?.code).toBe('CONFLICT');
    expect(busy?.details).toMatchObject({ session_id: live.id });

    await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: f.sibling.id, status: 'CANCELLED' });
    const cancelled = await failure(spawn(h, f.parent.id, f.sibling.id));
    expect(cancelled?.code).toBe('CONFLICT');
    expect(cancelled?.message).toMatch(/CANCELLED/);

    const held: Task = await h.task(f.ws.id, 'held', f.parent.id);
    const holdId = randomUUID();
    await h.sql`INSERT INTO orchestrator.tree_holds (id, workspace_id, root_task_id, mode, created_by) VALUES (${holdId}, ${f.ws.id}, ${held.id}, 'pause', 'test')`;
    await h.sql`INSERT INTO orchestrator.tree_hold_members (hold_id, task_id, depth, task_status) VALUES (${holdId}, ${held.id}, 0, 'TODO')`;
    const refused = await failure(spawn(h, f.parent.id, held.id, 'go'));
    expect(refused?.code).toBe('CONFLICT');
    expect(refused?.details).toMatchObject({ hold_id: holdId, hold_mode: 'pause' });
    expect((await list(h, f.parent.id)).tasks.find((t) => t.id === held.id)?.hold).toEqual({ id: holdId, mode: 'pause' });

    expect(h.life.launches.length).toBe(launches);
    expect((await h.getTask(f.sibling.id)).sessions).toEqual([]);
    expect((await h.getTask(held.id)).sessions).toEqual([]);
    await h.stopChild(f.parent.id, f.child.id);
  });

  it('two concurrent spawns on one idle child start exactly one session', async () => {
    const f = await family();
    const results = await Promise.allSettled([spawn(h, f.parent.id, f.child.id, 'a'), spawn(h, f.parent.id, f.child.id, 'b')]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const rejected = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect((rejected.reason as KandevError).code).toBe('CONFLICT');
    expect((await h.getTask(f.child.id)).sessions).toHaveLength(1);
    await h.stopChild(f.parent.id, f.child.id);
  });
});
