import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcp, eventually } from '@kandev/testkit';
import { makeTask, startWorld, type World } from './support.js';

/**
 * R-11 end to end: a coordinating agent's delegation loop through a real MCP client (create,
 * watch, read, stop, restart) against real scripted agents, who may and may not use the read and
 * restart tools, a small children cap, and the per-token MCP rate.
 */
let w: World;
beforeAll(async () => {
  // The shipped rate (20 per second, a burst of 40); children capped at 3 to reach the cap quickly.
  w = await startWorld({ KANDEV_AGENT_RATE: '20', KANDEV_AGENT_BURST: '40', KANDEV_MAX_CHILDREN: '3' });
});
afterAll(async () => w?.stop());

const mcpOf = async (taskId: string) => connectMcp(w.stack.mcpUrl, await w.stack.agentToken(taskId));
type Conversation = {
  task_id: string;
  session_id: string | null;
  items: Array<{ seq: number; role: string; kind: string; text: string }>;
  next_seq: number | null;
};

describe('the delegation loop', () => {
  it('create → list → read → stop → spawn: a stopped child restarts and runs its new prompt', async () => {
    const { task: parent } = await makeTask(w.api, { title: 'coordinator' });
    const mcp = await mcpOf(parent.id);

    const created = await mcp.callJson('create_task_kandev', { title: 'worker', prompt: 'hello child' });
    expect(created.isError).toBe(false);
    const child = created.json as { id: string; session_id: string };

    // Watch: the child is listed with its live session, idle once the echo turn ended.
    const listed = await eventually(
      async () => {
        const r = await mcp.callJson('list_tasks_kandev', {});
        const c = r.json.tasks[0];
        return c?.session?.state === 'WAITING_FOR_INPUT' ? r.json : null;
      },
      30_000,
      250,
    );
    expect(listed.tasks).toEqual([
      {
        id: child.id,
        title: 'worker',
        status: 'IN_PROGRESS',
        session: { id: child.session_id, state: 'WAITING_FOR_INPUT' },
        hold: null,
        pending_questions: 0,
        pending_permissions: 0,
      },
    ]);

    // Read: the prompt and the agent's echo.
    const conv = (await mcp.callJson('get_task_conversation_kandev', { task_id: child.id })).json as Conversation;
    expect(conv.session_id).toBe(child.session_id);
    expect(conv.items[0]).toMatchObject({ role: 'user', kind: 'prompt', text: 'hello child' });
    expect(conv.items.some((i) => i.role === 'agent' && i.kind === 'agent_text' && i.text.includes('hello child'))).toBe(true);
    expect(conv.next_seq).toBeNull();

    // Stop, then restart with a new session that runs.
    expect((await mcp.callJson('stop_task_kandev', { task_id: child.id })).json.status).toBe('stopped');
    const spawned = await mcp.callJson('spawn_session_kandev', { task_id: child.id, prompt: 'second run' });
    expect(spawned.json).toEqual({ task_id: child.id, session_id: expect.any(String), status: 'started' });
    const second = spawned.json.session_id as string;
    expect(second).not.toBe(child.session_id);
    const conv2 = await eventually(
      async () => {
        const c = (await mcp.callJson('get_task_conversation_kandev', { task_id: child.id })).json as Conversation;
        return c.items.some((i) => i.role === 'agent' && i.text.includes('second run')) ? c : null;
      },
      30_000,
      250,
    );
    expect(conv2.session_id).toBe(second);
    const t = (await w.api.get(`/tasks/${child.id}`)).body;
    expect(t.sessions.map((s: { id: string; state: string }) => [s.id, s.state])).toEqual([
      [child.session_id, 'CANCELLED'],
      [second, expect.stringMatching(/RUNNING|WAITING_FOR_INPUT/)],
    ]);

    // A child with a live session is not spawned again.
    const again = await mcp.callJson('spawn_session_kandev', { task_id: child.id });
    expect(again.isError).toBe(true);
    expect(again.text).toMatch(/^backend error \[CONFLICT\]: task already has a live session/);
    await w.api.post(`/tasks/${child.id}/stop`);
  });

  it('refuses self, sibling, grandparent and another workspace with FORBIDDEN, and reads or starts nothing', async () => {
    const { workspace_id, task: grandparent } = await makeTask(w.api, { title: 'grandparent' });
    const { task: parent } = await makeTask(w.api, { workspace_id, parent_id: grandparent.id, title: 'parent' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'child' });
    const { task: sibling } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'sibling' });
    const { task: stranger } = await makeTask(w.api, { title: 'elsewhere' });
    await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: 'secret plans' });
    const before = (await w.api.get(`/tasks/${child.id}`)).body;
    for (const caller of [child, sibling, grandparent, stranger]) {
      const mcp = await mcpOf(caller.id);
      const read = await mcp.callJson('get_task_conversation_kandev', { task_id: child.id });
      expect(read.text, caller.title).toMatch(/^backend error \[FORBIDDEN\]/);
      expect(read.text).not.toContain('secret plans');
      const spawn = await mcp.callJson('spawn_session_kandev', { task_id: child.id, prompt: 'hijack' });
      expect(spawn.text, caller.title).toMatch(/^backend error \[FORBIDDEN\]/);
      const list = await mcp.callJson('list_tasks_kandev', {});
      expect(list.json.tasks.map((t: { id: string }) => t.id)).not.toContain(child.id);
      await mcp.close();
    }
    const after = (await w.api.get(`/tasks/${child.id}`)).body;
    expect(after.sessions.map((s: { id: string }) => s.id)).toEqual(before.sessions.map((s: { id: string }) => s.id));
    await w.api.post(`/tasks/${child.id}/stop`);
  });

  it('refuses to spawn a CANCELLED child and a child in a paused tree (CONFLICT), launching nothing', async () => {
    const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
    const { task: cancelled } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'cancelled' });
    const { task: paused } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'paused' });
    expect((await w.api.patch(`/tasks/${cancelled.id}`, { status: 'CANCELLED' })).status).toBe(200);
    await w.api.ok('POST', `/tasks/${paused.id}/tree/pause`, { reason: 'e2e' });
    const mcp = await mcpOf(parent.id);
    const a = await mcp.callJson('spawn_session_kandev', { task_id: cancelled.id, prompt: 'go' });
    expect(a.text).toMatch(/^backend error \[CONFLICT\]/);
    const b = await mcp.callJson('spawn_session_kandev', { task_id: paused.id, prompt: 'go' });
    expect(b.text).toMatch(/^backend error \[CONFLICT\]: task is held by a tree pause hold/);
    const list = (await mcp.callJson('list_tasks_kandev', {})).json.tasks as Array<{ id: string; hold: unknown }>;
    expect(list.find((t) => t.id === paused.id)?.hold).toMatchObject({ mode: 'pause' });
    for (const t of [cancelled, paused]) expect((await w.api.get(`/tasks/${t.id}`)).body.sessions).toEqual([]);
  });
});

describe('limits and rates', () => {
  it('create_task_kandev past KANDEV_MAX_CHILDREN (3 here): the 3rd child is accepted, the 4th refused with CONFLICT naming the limit', async () => {
    const { task: parent } = await makeTask(w.api, { title: 'prolific' });
    const mcp = await mcpOf(parent.id);
    for (let i = 1; i <= 3; i++) expect((await mcp.callJson('create_task_kandev', { title: `c${i}` })).isError).toBe(false);
    const fourth = await mcp.callTool({ name: 'create_task_kandev', arguments: { title: 'c4' } });
    const r = fourth as { isError?: boolean; content: Array<{ text?: string }>; structuredContent?: Record<string, unknown> };
    expect(r.isError).toBe(true);
    expect(r.content[0]?.text).toMatch(/^backend error \[CONFLICT\]/);
    expect(r.structuredContent).toMatchObject({ code: 'CONFLICT', details: { limit: 'children_per_task', max: 3, current: 3 } });
    expect((await w.api.get(`/tasks?workspace_id=${parent.workspace_id}&parent_id=${parent.id}`)).body.items).toHaveLength(3);
  });

  it('a flood of MCP calls from one token is answered 429 RATE_LIMITED with Retry-After while another token is served normally', async () => {
    const { task: flooder } = await makeTask(w.api, { title: 'flooder' });
    const { task: calm } = await makeTask(w.api, { title: 'calm' });
    const token = await w.stack.agentToken(flooder.id);
    const calmMcp = await mcpOf(calm.id);
    const post = (id: number) =>
      fetch(w.stack.mcpUrl, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'list_tasks_kandev', arguments: {} } }),
      });
    const [flood, calmAnswer] = await Promise.all([Promise.all(Array.from({ length: 80 }, (_, i) => post(i + 1))), calmMcp.callJson('list_tasks_kandev', {})]);
    expect(calmAnswer).toMatchObject({ isError: false, json: { tasks: [] } });
    const limited = flood.filter((r) => r.status === 429);
    expect(flood.filter((r) => r.status === 200).length).toBeLessThanOrEqual(40);
    expect(limited.length).toBeGreaterThanOrEqual(40);
    for (const r of limited) {
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(/^backend error \[RATE_LIMITED\]/);
    }
  });
});
