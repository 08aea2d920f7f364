import { afterAll, beforeAll, expect, it } from 'vitest';
import { eventually } from '@kandev/testkit';
import { makeTask, startWorld, type World } from './support.js';

/**
 * nobody answers. A stack whose questions expire after 3 s (CLARIFICATION_TIMEOUT_MS): the
 * scripted agent's waiting tool call gets the typed `{"expired": true}` and its turn carries on; the
 * bundle is closed `expired` and a late answer is refused with its final state.
 */
let w: World;
beforeAll(async () => {
  w = await startWorld({ CLARIFICATION_TIMEOUT_MS: '3000' });
});
afterAll(async () => w?.stop());

it('an unanswered question expires: the agent gets {"expired": true} and carries on; a late answer is CONFLICT', async () => {
  const { task } = await makeTask(w.api, { agent: 'scripted-acp' });
  const prompt = JSON.stringify({ script: [{ ask: [{ id: 'db', text: 'Which database?' }] }, { say: 'after the questions' }] });
  const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt });
  const pid = (await w.api.get(`/sessions/${session.id}`)).body.execution.pid as number;
  // The wait itself is 3 s; the rest is the prompt reaching the agent on a busy machine.
  const [result] = await eventually(async () => {
    const r = w.agentEvents(pid).filter((e) => e.kind === 'mcp_result' && e.tool === 'ask_user_questions');
    return r.length ? r : null;
  }, 45_000);
  const outcome = JSON.parse(result!.text as string);
  expect(outcome).toMatchObject({ status: 'expired', expired: true, answers: [], questions: [{ id: 'db', status: 'expired' }] });
  await eventually(async () => w.agentEvents(pid).some((e) => e.kind === 'say' && e.text === 'after the questions'));

  const bundle = (await w.api.get(`/clarification/${outcome.bundle_id}`)).body;
  expect(bundle).toMatchObject({ status: 'expired', waiter_live: false, active: false });
  const late = await w.api.post(`/clarification/${outcome.bundle_id}/respond`, { answers: [{ question_id: 'db', answer: 'late' }] });
  expect(late.status).toBe(409);
  expect(late.body.error).toMatchObject({ code: 'CONFLICT' });
});
