import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, stubPrompt } from '@kandev/testkit';
import { makeTask, REAL_AGENTS, reportOnFailure, startRealWorld, type RealWorld } from './support.js';

/**
 * R-5 through the agents' own MCP clients: the model (the stub) calls `ask_user_questions`, the
 * published agent holds the tool call open while kandev waits for the operator, the operator
 * answers over HTTP, and the answer comes back to the model as the tool result.
 */
let w: RealWorld;
reportOnFailure(() => w);
beforeAll(async () => {
  w = await startRealWorld();
});
afterAll(async () => w?.stop());

describe.each(REAL_AGENTS)('ask_user_questions called by the published %s agent', (agent) => {
  it('waits for the operator, and hands the answer back to the model', async () => {
    const marker = `ask-${agent}-${Date.now()}`;
    const { task } = await makeTask(w.api, { agent, title: 'asks' });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, {
      prompt: stubPrompt(
        { tool: 'ask_user_questions', args: { questions: [{ id: 'db', text: 'Which database?', options: ['postgres', 'sqlite'] }] }, then: 'answer received' },
        marker,
      ),
    });
    // The bundle is pending on the session's turn, with its waiter (the agent's held tool call) live.
    const active = await eventually(
      async () => {
        const res = await w.api.get(`/tasks/${task.id}/clarifications`);
        return res.body?.active?.waiter_live ? res.body.active : null;
      },
      90_000,
      100,
    );
    expect(active).toMatchObject({ session_id: session.id, status: 'pending', questions: [{ id: 'db', text: 'Which database?', status: 'pending' }] });
    const answered = await w.api.post(`/clarification/${active.id}/respond`, { answers: [{ question_id: 'db', answer: 'postgres' }] });
    expect(answered.status).toBe(200);
    expect(answered.body).toMatchObject({ status: 'answered', agent_resumed: true });

    const done = await eventually(
      async () => {
        const s = (await w.api.get(`/sessions/${session.id}`)).body;
        return s.turns[0]?.completed_at ? s : null;
      },
      90_000,
      100,
    );
    expect(done.turns[0].stop_reason).toBe('end_turn');
    const call = w.stub.toolCalls.find((c) => c.tool.name.endsWith('ask_user_questions') && c.result !== undefined && c.result.includes(active.id));
    expect(call).toBeDefined();
    // Agents wrap tool output differently (Gemini CLI quotes the JSON inside its own): unescape first.
    const result = call!.result!.replace(/\\/g, '');
    expect(result).toContain('"status":"answered"');
    expect(result).toContain('postgres');
  });
});
