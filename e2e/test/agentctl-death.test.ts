import { afterAll, beforeAll, expect, it } from 'vitest';
import { cmdline, eventually, processAlive, procStat } from '@kandev/testkit';
import { makeTask, sleepScript, sharedWorld, type SharedWorld } from './support.js';

/**
 * Issue 11: agentctl killed from outside (kill -9) mid-turn. The execution died — nobody asked it
 * to stop — so it is reported as killed, the session FAILED saying so, and the turn ended in error,
 * not as a graceful stop with a cancelled turn. Nothing is left running.
 */
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

it('reports a killed agentctl as killed: session FAILED, turn error, no process left', async () => {
  const { task } = await makeTask(w.api);
  const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000) });
  const execution = await eventually(async () => {
    const list = (await w.api.get(`/tasks/${task.id}/executions`)).body as Array<{ status: string; pid: number | null }>;
    return list.find((e) => e.status === 'RUNNING' && e.pid) ?? null;
  });
  // agentctl is the agent's parent.
  const agentctl = procStat(execution.pid!)!.ppid;
  expect(cmdline(agentctl)).toMatch(/agentctl/);
  process.kill(agentctl, 'SIGKILL');

  const ended = await eventually(async () => {
    const s = (await w.api.get(`/sessions/${session.id}`)).body;
    return s.state === 'FAILED' ? s : null;
  }, 20_000);
  expect(ended.error_message).toMatch(/killed/);
  expect(ended.error_message).not.toMatch(/graceful/);
  expect(ended.turns[0]).toMatchObject({ stop_reason: 'error', completed_at: expect.any(String) });
  await eventually(async () => (!processAlive(execution.pid!) ? true : null), 10_000);
});
