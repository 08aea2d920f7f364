import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertInvariants } from '@kandev/testkit';
import { makeTask, sleepScript, type World } from '../test/support.js';
import { agentOf as agentOfIn, bounds, RECONCILE_INTERVAL_MS, REGISTRY_TTL_MS, startFaultWorld, WITHIN_MS } from '../test/fault-world.js';

/**
 * Issue 11, the long faults (`npm run test:faults`): lifecycle stalled (SIGSTOP) for longer than
 * the registry TTL with a stop and a cancel sent meanwhile. After SIGCONT the invariant checker
 * (packages/testkit/src/invariants.ts) must pass within the documented bounds.
 */
let w: World;
const agentPids = new Map<string, number>();
beforeAll(async () => {
  w = await startFaultWorld();
}, 120_000);
afterAll(async () => w?.stop());
const agentOf = (taskId: string, sessionId: string) => agentOfIn(w, agentPids, taskId, sessionId);

describe('long faults', () => {
  it('SIGSTOP of lifecycle for twice the registry TTL, with a stop and a cancel sent meanwhile: after SIGCONT nothing runs unregistered or unwanted', async () => {
    const made = await Promise.all([makeTask(w.api), makeTask(w.api), makeTask(w.api)]);
    const sessions = await Promise.all(made.map((m) => w.api.ok('POST', `/tasks/${m.task.id}/sessions`, { prompt: sleepScript(120_000) })));
    await Promise.all(made.map((m, i) => agentOf(m.task.id, sessions[i].id)));

    const lifecycle = w.stack.services.get('lifecycle')!;
    lifecycle.process.kill('SIGSTOP');
    let answers: Array<{ status: number }> = [];
    try {
      const inFlight = Promise.all([w.api.post(`/tasks/${made[0]!.task.id}/stop`), w.api.post(`/sessions/${sessions[1].id}/cancel`)]);
      // Past the TTL the entries lapse and the reconciler gives the sessions up.
      await new Promise((r) => setTimeout(r, 2 * REGISTRY_TTL_MS + 5_000 + RECONCILE_INTERVAL_MS));
      lifecycle.process.kill('SIGCONT');
      answers = await inFlight;
    } finally {
      lifecycle.process.kill('SIGCONT');
    }
    // Every request got an answer (a result or an error), none hung.
    for (const a of answers) expect(a.status).toBeGreaterThanOrEqual(200);
    await assertInvariants(w.stack, { agentPids, bounds, withinMs: WITHIN_MS });
  }, 180_000);
});
