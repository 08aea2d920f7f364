import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcp, eventually, processAlive, stubPrompt } from '@kandev/testkit';
import { makeTask, REAL_AGENTS, requestFor, runningSession, reportOnFailure, startRealWorld, type RealWorld } from './support.js';

/**
 * R-1 through the agents' own MCP clients: the parent runs the published agent, its model (the
 * stub) calls `stop_task_kandev` on the running child, the agent forwards the call to kandev's MCP
 * server with the token agentctl configured, and the tool result comes back to the model.
 */
let w: RealWorld;
reportOnFailure(() => w);
beforeAll(async () => {
  w = await startRealWorld();
});
afterAll(async () => w?.stop());

describe.each(REAL_AGENTS)('stop_task_kandev called by the published %s agent', (agent) => {
  it('stops the running child and hands the result back to the model', async () => {
    const marker = `stop-child-${agent}-${Date.now()}`;
    const { workspace_id, task: parent } = await makeTask(w.api, { agent, title: 'coordinator' });
    // The child runs a scripted agent that would sleep for a minute.
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker', agent: 'scripted-acp' });
    const childSession = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: JSON.stringify({ script: [{ sleep_ms: 60_000 }] }) });
    const childPid = (await runningSession(w.api, childSession.id)).execution.pid as number;

    const session = await w.api.ok('POST', `/tasks/${parent.id}/sessions`, {
      prompt: stubPrompt({ tool: 'stop_task_kandev', args: { task_id: child.id }, then: 'stop_task_kandev answered' }, marker),
    });
    const done = await eventually(
      async () => {
        const s = (await w.api.get(`/sessions/${session.id}`)).body;
        return s.turns[0]?.completed_at ? s : null;
      },
      90_000,
      100,
    );
    expect(done.turns[0].stop_reason).toBe('end_turn');

    // The model was offered kandev's tools through the agent's MCP client, message_task_kandev among them.
    const offered = requestFor(w.stub, marker)!.tools.map((t) => t.qualified);
    expect(offered.some((t) => t.endsWith('stop_task_kandev'))).toBe(true);
    expect(offered.some((t) => t.endsWith('message_task_kandev'))).toBe(true);
    // The call went out and its result reached the model.
    const call = w.stub.toolCalls.find((c) => c.tool.name.endsWith('stop_task_kandev') && c.args.task_id === child.id);
    expect(call?.result).toBeDefined();
    // Agents wrap tool output differently (Gemini CLI quotes the JSON inside its own): unescape first.
    const result = call!.result!.replace(/\\/g, '');
    expect(result).toContain('"status":"stopped"');
    expect(result).toContain(child.id);

    // The child really stopped.
    const c = (await w.api.get(`/tasks/${child.id}`)).body;
    expect(c.status).toBe('REVIEW');
    expect(c.sessions[0]).toMatchObject({ id: childSession.id, state: 'CANCELLED' });
    await eventually(async () => !processAlive(childPid), 15_000);
  });
});

describe.each(REAL_AGENTS)('message_task_kandev interrupting the published %s agent', (agent) => {
  it('cancels the live turn (the model stream closes) and delivers the message with its context', async () => {
    const marker = `interrupt-${agent}-${Date.now()}`;
    const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker', agent });
    const session = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: stubPrompt({ slow: { ms: 120_000 } }, marker) });
    await runningSession(w.api, session.id);
    const stream = await eventually(async () => {
      const req = requestFor(w.stub, marker);
      return req ? w.stub.streams.find((x) => x.request === req.index && x.endedAt === undefined) : undefined;
    }, 60_000);

    const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(parent.id));
    const next = `new-direction-${marker}`;
    const res = await mcp.callJson('message_task_kandev', { task_id: child.id, prompt: stubPrompt({ say: 'redirected' }, next), delivery_mode: 'interrupt' });
    expect(res.json).toMatchObject({ task_id: child.id, session_id: session.id, status: 'sent' });
    await eventually(async () => stream.endedAt !== undefined, 15_000);
    expect(stream.closedByClient).toBe(true);
    const s = await eventually(async () => {
      const b = (await w.api.get(`/sessions/${session.id}`)).body;
      return b.turns.length === 2 && b.turns[1].completed_at ? b : null;
    }, 60_000);
    expect(s.turns.map((t: { stop_reason: string }) => t.stop_reason)).toEqual(['cancelled', 'end_turn']);
    // The agent took the message (and the sender context agentctl puts before it) as its next prompt.
    const delivered = requestFor(w.stub, next);
    expect(delivered?.userText).toContain(parent.id);
    await w.api.post(`/tasks/${child.id}/stop`);
  });
});
