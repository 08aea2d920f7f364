import { eventually, processAlive } from '@kandev/testkit';
import type { Scenario, ScenarioResult } from '../scenario.js';
import { e2eIterations, startBenchStack, summarize } from '../e2e.js';
import { family, stopChild } from '../families.js';

/** Agents each keeping one core busy (a build, a test run: the scripted agents' `busy_ms` step), on 2 cores. */
const HOGS = 3;
const PACE_MS = 250;

/**
 * `stop_task_kandev` of a running child while other agents keep every core busy, once with the
 * agents at the control plane's priority (`AGENT_NICE=0`) and once below it (the default, 10):
 * what a CPU-hungry agent does to the path that is meant to stop it. Stops one at a time, each
 * after its predecessor's agent is gone and 250 ms of quiet, as `12-stop-task-mcp`.
 */
const scenario: Scenario = {
  name: 'stop_task_kandev while agents keep the CPU busy',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const iterations = e2eIterations(20);
    const results: ScenarioResult[] = [];
    for (const nice of [0, 10]) {
      const b = await startBenchStack({ TEARDOWN_GRACE_MS: '500', AGENT_NICE: String(nice) });
      try {
        const targets = await family(b, iterations);
        const hogs = await family(b, HOGS, [{ busy_ms: 600_000 }]);
        const samples: number[] = [];
        for (const child of targets.children) {
          samples.push(await stopChild(targets.mcp, child));
          await eventually(async () => !processAlive(targets.pids.get(child)!), 30_000);
          await new Promise((r) => setTimeout(r, PACE_MS));
        }
        for (const hog of hogs.children) await stopChild(hogs.mcp, hog);
        await targets.mcp.close();
        await hogs.mcp.close();
        const stats = summarize(samples);
        ctx.log(`AGENT_NICE=${nice}: p50 ${stats.p50.toFixed(2)} ms, p99 ${stats.p99.toFixed(2)} ms`);
        results.push({
          id: `load.stop_task.agent_nice_${nice}`,
          label: `stop_task_kandev of a running child, 1 caller, while ${HOGS} agents each keep a core busy; agents at AGENT_NICE=${nice}`,
          stats,
          ...(nice ? { baseline: 'load.stop_task.agent_nice_0' } : {}),
        });
      } finally {
        await b.stop();
      }
    }
    return results;
  },
};
export default scenario;
