import { writeFileSync } from 'node:fs';
import { launchFloor, type LaunchFloor, type ScriptedAgent } from './launch-floor.js';

/*
 * `npm run bench:launch-floor`: the launch floor alone (agentctl and a scripted agent spawned
 * directly, no control plane), for each scripted protocol, BENCH_FLOOR_RUNS runs of
 * BENCH_FLOOR_COUNT pairs. What a change to agentctl's or the agents' start-up costs shows here
 * in a minute, without the tree curve's stack. Writes bench/launch-floor.json.
 */
const count = Number(process.env.BENCH_FLOOR_COUNT ?? 40);
const runs = Number(process.env.BENCH_FLOOR_RUNS ?? 3);
const agents: ScriptedAgent[] = ['scripted-acp', 'scripted-codex'];

const results: Record<string, LaunchFloor[]> = {};
for (const agent of agents) {
  results[agent] = [];
  for (let i = 0; i < runs; i++) {
    const floor = await launchFloor(count, agent);
    results[agent].push(floor);
    console.log(`[launch-floor] ${agent}: ${floor.count} pairs in ${floor.ms.toFixed(0)} ms, ${floor.perSec.toFixed(2)}/s`);
  }
}
const out = new URL('../../launch-floor.json', import.meta.url);
writeFileSync(out, `${JSON.stringify({ at: new Date().toISOString(), count, runs, results }, null, 2)}\n`);
