import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, stubPrompt } from '@kandev/testkit';
import { makeTask, reportOnFailure, startRealWorld, type RealWorld } from './support.js';

/**
 * R-11.1 through the published agents' own MCP clients: a parent running Codex or Claude Code
 * (its model is the stub) lists its children, reads a stopped child's conversation and restarts it,
 * one tool call per turn; each tool result comes back to the model.
 */
let w: RealWorld;
reportOnFailure(() => w);
beforeAll(async () => {
  w = await startRealWorld();
});
afterAll(async () => w?.stop());

describe.each(['codex', 'claude-code'] as const)('the published %s agent coordinating its children', (agent) => {
  it('lists its children, reads one conversation and restarts the stopped child', async () => {
    const { workspace_id, task: parent } = await makeTask(w.api, { agent, title: 'coordinator' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker', agent: 'scripted-acp' });
    const first = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: `child says hi ${agent}` });
    await eventually(async () => (await w.api.get(`/sessions/${first.id}`)).body.turns[0]?.completed_at, 30_000, 100);
    await w.api.ok('POST', `/tasks/${child.id}/stop`);

    /** One parent turn whose model calls `tool`; the tool's result as the agent handed it back (unescaped). */
    let session: { id: string } | null = null;
    const turn = async (tool: string, args: Record<string, unknown>) => {
      const marker = `${tool}-${agent}-${Date.now()}`;
      const prompt = stubPrompt({ tool, args, then: `${tool} answered` }, marker);
      const from = w.stub.toolCalls.length;
      if (!session) session = await w.api.ok('POST', `/tasks/${parent.id}/sessions`, { prompt });
      else await w.api.ok('POST', `/sessions/${session.id}/prompt`, { prompt });
      const call = await eventually(async () => w.stub.toolCalls.slice(from).find((c) => c.tool.name.endsWith(tool) && c.result !== undefined), 90_000, 100);
      await eventually(
        async () => {
          const s = (await w.api.get(`/sessions/${session!.id}`)).body;
          return s.turns.length > 0 && s.turns.every((t: { completed_at: string | null }) => t.completed_at) ? s : null;
        },
        90_000,
        100,
      );
      return call.result!.replace(/\\/g, '');
    };

    const listed = await turn('list_tasks_kandev', {});
    expect(listed).toContain(child.id);
    expect(listed).toContain('"session":null');

    const read = await turn('get_task_conversation_kandev', { task_id: child.id });
    expect(read).toContain(`child says hi ${agent}`);
    expect(read).toContain(first.id);

    const spawned = await turn('spawn_session_kandev', { task_id: child.id, prompt: `restarted ${agent}` });
    expect(spawned).toContain('"status":"started"');
    // The restarted child runs its new prompt (the scripted agent echoes it).
    const t = await eventually(async () => {
      const b = (await w.api.get(`/tasks/${child.id}`)).body;
      return b.sessions.length === 2 ? b : null;
    }, 30_000);
    expect(t.sessions[0]).toMatchObject({ id: first.id, state: 'CANCELLED' });
    const second = t.sessions[1].id as string;
    await eventually(async () => {
      const m = (await w.api.get(`/sessions/${second}/messages`)).body;
      return m.items.some((i: { role: string; text: string }) => i.role === 'agent' && i.text.includes(`restarted ${agent}`));
    }, 30_000);
    await w.api.post(`/tasks/${child.id}/stop`);
    await w.api.post(`/tasks/${parent.id}/stop`);
  });
});
