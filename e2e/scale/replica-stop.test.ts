import { describe, expect, it } from 'vitest';
import { eventually, processAlive } from '@kandev/testkit';
import { makeTask } from '../test/support.js';
import { killOrchestratorWaitingOn, REQUEST_TIMEOUT_MS, startRunning, useFaultWorld } from '../test/fault-world.js';

/**
 * B-6 (ADR 0062): the death of a replica costs no caller anything. Twelve operator stops at once,
 * on a 3-node NATS cluster with 2 replicas of every service; the orchestrator replica holding one of
 * them (inside its transaction, waiting on the task's row) is killed with SIGKILL. The gateway's
 * request client resends that idempotent stop once to the surviving replica: 12 of 12 answered
 * `stopped` (before: 11 of 12, the twelfth UNAVAILABLE after about 2.5 s).
 */
const fw = useFaultWorld({ natsCluster: 3, replicas: 2 });
const STOPS = 12;

describe('replica loss under a burst of stops', () => {
  it(`${STOPS} of ${STOPS} stops answered stopped when the orchestrator replica holding one is killed`, async () => {
    const w = fw.world();
    const running: Array<{ task: { id: string }; sessionId: string; pid: number }> = [];
    for (let i = 0; i < STOPS; i++) {
      const { task } = await makeTask(w.api, { title: `stop-${i}` });
      running.push({ task, ...(await startRunning(w, fw.agentPids, task.id)) });
    }
    let answers: Array<{ status: number; body: { status?: string; error?: unknown } }> = [];
    const victim = await killOrchestratorWaitingOn(
      w,
      (tx) => tx`SELECT id FROM orchestrator.tasks WHERE id = ${running[0]!.task.id} FOR UPDATE`,
      async () => {
        answers = await Promise.all(running.map((r) => w.api.post(`/tasks/${r.task.id}/stop`)));
      },
    );
    await w.stack.restartInstance(victim);
    await eventually(async () => (answers.length === STOPS ? true : null), REQUEST_TIMEOUT_MS + 5_000);
    console.info(`[replica-loss] killed ${victim}; answers: ${answers.map((a) => `${a.status}:${a.body.status ?? JSON.stringify(a.body.error)}`).join(' ')}`);
    expect(answers.map((a) => [a.status, a.body.status])).toEqual(running.map(() => [200, 'stopped']));
    await eventually(async () => (running.every((r) => !processAlive(r.pid)) ? true : null), 30_000);
    for (const r of running) {
      const t = (await w.api.get(`/tasks/${r.task.id}`)).body as { sessions: Array<{ id: string; state: string }> };
      expect(t.sessions.find((s) => s.id === r.sessionId)?.state).toBe('CANCELLED');
    }
  });
});
