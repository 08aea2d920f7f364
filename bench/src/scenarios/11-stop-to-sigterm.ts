import { Life } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import type { Scenario } from '../scenario.js';
import { agentEventAfter, e2eIterations, idleSession, natsAndHttpFloor, preciseNow, startBenchStack, summarize, summedFloor } from '../e2e.js';

/**
 * latency: a lifecycle stop request (`life.<instance>.exec.stop`, as the orchestrator sends it)
 * until the agent process receives SIGTERM (the scripted agent logs the instant). Each iteration
 * launches a fresh execution first (not timed).
 */
const scenario: Scenario = {
  name: 'lifecycle stop to SIGTERM',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const iterations = e2eIterations(40);
    const b = await startBenchStack();
    ctx.defer(() => b.stop());
    const floor = await natsAndHttpFloor(b, 500);
    const toSigterm: number[] = [];
    const accepted: number[] = [];
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id;
    for (let i = 0; i < iterations + 3; i++) {
      const s = await idleSession(b, { workspace_id: ws });
      // Let the fresh agentctl and agent finish starting (module loading, JIT) so the figure is the
      // stop path's, not a start-up burst's on 2 cores.
      await new Promise((r) => setTimeout(r, 300));
      const t0 = preciseNow();
      await request(b.asOrchestrator, Life.stop.at('lifecycle-1'), { execution_id: s.execution_id, reason: 'bench' });
      const t1 = preciseNow();
      const sig = await agentEventAfter(b, s.pid, t0, (e) => e.kind === 'sigterm');
      if (i >= 3) {
        toSigterm.push(sig.mono - t0);
        accepted.push(t1 - t0);
      }
    }
    return [
      {
        id: 'floor.nats+http.stop_run',
        label: 'bare NATS + loopback HTTP round trips (same run as the stop figures)',
        stats: summedFloor(floor.natsSamples, floor.httpSamples),
      },
      {
        id: 'stop.request_to_sigterm',
        label: 'life.exec.stop request sent → agent receives SIGTERM (via agentctl /api/v1/stop)',
        stats: summarize(toSigterm),
        baseline: 'floor.nats+http.stop_run',
      },
      {
        id: 'stop.request_accepted',
        label: 'life.exec.stop request sent → accepted reply (teardown continues asynchronously)',
        stats: summarize(accepted),
        baseline: 'floor.nats+http.stop_run',
      },
    ];
  },
};
export default scenario;
