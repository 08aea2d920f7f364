import { beginResult, renderTables, type Figure } from '../results.js';
import { launchFloor, type LaunchFloor, type ScriptedAgent } from './launch-floor.js';

/*
 * `npm run bench:launch-floor`: the launch floor alone (agentctl and a scripted agent spawned
 * directly, no control plane), for each scripted protocol, BENCH_FLOOR_RUNS runs of
 * BENCH_FLOOR_COUNT pairs. What a change to agentctl's or the agents' start-up costs shows here
 * in a minute, without the tree curve's stack. Writes bench/results/launch-floor.json.
 */
const count = Number(process.env.BENCH_FLOOR_COUNT ?? 40);
const runs = Number(process.env.BENCH_FLOOR_RUNS ?? 3);
const agents: ScriptedAgent[] = ['scripted-acp', 'scripted-codex'];

const record = beginResult({
  name: 'launch-floor',
  title: 'The launch floor: agentctl and a scripted agent, no control plane',
  command: 'npm run bench:launch-floor',
});
const results: Record<string, LaunchFloor[]> = {};
for (const agent of agents) {
  results[agent] = [];
  for (let i = 0; i < runs; i++) {
    const floor = await launchFloor(count, agent);
    results[agent].push(floor);
    console.log(`[launch-floor] ${agent}: ${floor.count} pairs in ${floor.ms.toFixed(0)} ms, ${floor.perSec.toFixed(2)}/s`);
  }
}
const figures: Figure[] = Object.entries(results).flatMap(([agent, floors]) =>
  floors.map((x, i) => ({
    id: `launch_floor.${agent}.run${i + 1}`,
    label: `${x.count} agentctl + ${agent} pairs, ${x.workers} at a time, until each agentctl is ready (run ${i + 1})`,
    count: x.count,
    workers: x.workers,
    ms: x.ms,
    per_s: x.perSec,
  })),
);
console.log(`[launch-floor] wrote ${record.write(figures)}`);
renderTables();
