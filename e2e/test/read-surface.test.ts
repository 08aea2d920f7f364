import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, WsClient } from '@kandev/testkit';
import { AGENTS, makeTask, sharedWorld, type SharedWorld } from './support.js';

/**
 * end to end: a scripted agent's streamed text reaches the session's transcript
 * (coalesced into one item), is pushed live on /ws as session.message, and the task is on its
 * workspace's listing.
 */
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

describe.each(AGENTS)('read surface with %s', (agent) => {
  it('keeps the prompt and the coalesced agent text, and pushes them to a workspace subscriber', async () => {
    const { workspace_id, task } = await makeTask(w.api, { agent, title: 'Talkative task' });
    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      expect(await ws.request('subscribe', { workspace_id })).toMatchObject({ type: 'response', payload: { subscribed: true, workspace_id } });
      const prompt = JSON.stringify({ script: [{ say: 'hello' }, { say: ' world' }] });
      const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt });
      const items = await eventually(async () => {
        const page = (await w.api.get(`/sessions/${session.id}/messages`)).body;
        const text = page.items.filter((i: { kind: string }) => i.kind === 'agent_text');
        return text.length && text.map((i: { text: string }) => i.text).join('') === 'hello world' ? page.items : null;
      }, 20_000);
      expect(items[0]).toMatchObject({ seq: 1, role: 'user', kind: 'prompt', text: prompt, turn_id: expect.any(String) });
      // One item for the turn's text, not one per chunk.
      const text = items.filter((i: { kind: string }) => i.kind === 'agent_text');
      expect(text).toEqual([
        { seq: 2, turn_id: items[0].turn_id, role: 'agent', kind: 'agent_text', text: 'hello world', meta: {}, created_at: expect.any(String) },
      ]);

      // Pushed live: the prompt and the text's chunks, with the item's seq.
      await ws.waitFor((f) => f.action === 'session.message' && f.payload.session_id === session.id && f.payload.kind === 'prompt');
      await eventually(async () => {
        const pushed = ws.notifications.filter((f) => f.action === 'session.message' && f.payload.session_id === session.id && f.payload.seq === 2);
        return pushed.map((f) => f.payload.text).join('') === 'hello world';
      });
      const first = ws.notifications.find((f) => f.action === 'session.message' && f.payload.seq === 2)!;
      expect(first.payload).toMatchObject({ op: 'created', kind: 'agent_text', role: 'agent', task_id: task.id, workspace_id });

      // The task is on its workspace's board, with its live session counted while it lives.
      const listed = (await w.api.get(`/tasks?workspace_id=${workspace_id}&q=talkative`)).body;
      expect(listed.items.map((t: { id: string }) => t.id)).toEqual([task.id]);
      expect(listed.items[0]).toMatchObject({ child_count: 0, hold: null, active_session_count: expect.any(Number) });
      expect((await w.api.get('/workspaces?limit=200')).body.items.map((x: { id: string }) => x.id)).toContain(workspace_id);

      // The transcript outlives the agent.
      await w.api.ok('POST', `/tasks/${task.id}/stop`, {});
      await eventually(async () => ((await w.api.get(`/sessions/${session.id}`)).body.execution === null ? true : null), 20_000);
      const after = (await w.api.get(`/sessions/${session.id}/messages`)).body;
      expect(after.items.slice(0, 2).map((i: { kind: string }) => i.kind)).toEqual(['prompt', 'agent_text']);
    } finally {
      ws.close();
    }
  });

  it('keeps a tool call and its result between the text around it', async () => {
    const { task } = await makeTask(w.api, { agent });
    const prompt = JSON.stringify({ script: [{ say: 'checking' }, { mcp: { tool: 'whoami_kandev', args: {} } }] });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt });
    const items = await eventually(async () => {
      const page = (await w.api.get(`/sessions/${session.id}/messages`)).body;
      return page.items.some((i: { kind: string }) => i.kind === 'tool_result') && page.items.at(-1).kind === 'agent_text' ? page.items : null;
    }, 20_000);
    expect(items.map((i: { kind: string }) => i.kind)).toEqual(['prompt', 'agent_text', 'tool_call', 'tool_result', 'agent_text']);
    expect(items[1].text).toBe('checking');
    expect(items[2].text).toContain('whoami_kandev');
    expect(items[3].meta).toMatchObject({ tool_call_id: items[2].meta.tool_call_id, status: 'completed' });
    expect(items[4].text).toContain(task.id); // the tool's answer, said by the agent
  });
});
