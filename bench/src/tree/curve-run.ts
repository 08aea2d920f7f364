// `npm run bench:tree-curve`: the tree-hold curve alone (curve.ts), on its own stack. Each run writes
// bench/results/<BENCH_CURVE_NAME>.json (default `tree-curve`, whose table TREE-CURVE.md shows) with
// BENCH_CURVE_LABEL as its note; a before and an after are two names (`tree-curve.before`, `.after`).
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBenchStack } from '../e2e.js';
import { curvePoint, LAUNCH_WORKERS, type CurvePoint } from './curve.js';
import { launchFloor, type LaunchFloor } from './launch-floor.js';
import { beginResult, renderTables, type Figure } from '../results.js';

const benchDir = fileURLToPath(new URL('../..', import.meta.url));
const counts = (process.env.BENCH_TREE_CURVE ?? '10,50,100,200').split(',').map(Number);
const label = process.env.BENCH_CURVE_LABEL ?? 'run';
const name = process.env.BENCH_CURVE_NAME ?? 'tree-curve';
const write = process.env.BENCH_WRITE !== '0';

interface TeardownFloor {
  n: number;
  agents_gone_ms: number;
  wall_ms: number;
  teardown_cpu_ms: number;
}

/**
 * `bench/teardown-cpu.mjs`: n agentctl + scripted agent pairs spawned directly, a turn in flight in
 * each, all stopped at once through agentctl's own HTTP stop, as the lifecycle stops them. What the
 * processes' own ending costs on this machine, the floor under the curve's "agents gone".
 */
function teardownFloor(n: number): TeardownFloor | null {
  // The pairs are spawned on a machine the run just loaded: a floor that fails is tried once more,
  // and one that fails twice is left out of the run (said in the log), not the run lost with it.
  for (let attempt = 1; attempt <= 2; attempt++) {
    try {
      const out = execFileSync(process.execPath, [join(benchDir, 'teardown-cpu.mjs')], {
        env: { ...process.env, N: String(n) },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const r = JSON.parse(out.trim().split('\n').pop()!) as TeardownFloor;
      return { n: r.n, agents_gone_ms: r.agents_gone_ms, wall_ms: r.wall_ms, teardown_cpu_ms: r.teardown_cpu_ms };
    } catch (e) {
      const why = ((e as { stderr?: string }).stderr || (e as Error).message).trim().split('\n').slice(-6).join('\n');
      console.error(`[tree-curve] teardown floor of ${n} pairs failed (attempt ${attempt} of 2):\n${why}`);
    }
  }
  return null;
}

/** A run's figures: one per point of the curve, the launch floor, one per teardown floor. */
function figuresOf(points: CurvePoint[], floor: LaunchFloor | null, teardown: TeardownFloor[]): Figure[] {
  return [
    ...points.map((p) => ({
      id: `curve.${p.live}`,
      label: `pause of a 1,000-task tree with ${p.live} live sessions`,
      live: p.live,
      reply_ms: p.replyMs,
      cancelled_ms: p.cancelledMs,
      agents_gone_ms: p.agentsGoneMs,
      agentctls_gone_ms: p.agentctlsGoneMs,
      get_p50: p.reads.p50,
      get_p99: p.reads.p99,
      get_max: p.reads.max,
      get_n: p.reads.n,
      quiet_get_p50: p.quietReads.p50,
      launch_per_s: p.launchPerSec,
      launch_refused: p.launchRefused,
      cpu_machine_ms: p.cpu.machineMs,
      cpu_exited_ms: p.reapedCpuMs,
      cpu_by_kind: Object.fromEntries(
        Object.entries(p.cpu.byKind)
          .filter(([, ms]) => ms > 0)
          .sort((x, y) => y[1] - x[1]),
      ),
    })),
    ...(floor
      ? [
          {
            id: 'launch_floor',
            label: `${floor.count} agentctl + scripted agent pairs spawned directly, ${floor.workers} at a time, until ready (no control plane)`,
            count: floor.count,
            ms: floor.ms,
            per_s: floor.perSec,
          },
        ]
      : []),
    ...teardown.map((t) => ({
      id: `teardown_floor.${t.n}`,
      label: `${t.n} pairs, a turn in flight in each, stopped at once through agentctl's HTTP stop (bench/teardown-cpu.mjs)`,
      live: t.n,
      agents_gone_ms: t.agents_gone_ms,
      all_exited_ms: t.wall_ms,
      cpu_ms: t.teardown_cpu_ms,
    })),
  ];
}

const f = (x: number, d = 0) => x.toFixed(d);
const record = beginResult({ name, title: 'Tree holds with live sessions: the curve', command: 'npm run bench:tree-curve' });
const b = await startBenchStack({ LAUNCH_TIMEOUT_MS: '60000', GATEWAY_REQUEST_TIMEOUT_MS: '90000' });
const points: CurvePoint[] = [];
let floor: LaunchFloor | null = null;
try {
  const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;
  for (const n of counts) points.push(await curvePoint(b, ws, n, (m) => console.log(`[tree-curve] ${m}`)));
} finally {
  await b.stop();
}
if (process.env.BENCH_LAUNCH_FLOOR !== '0') {
  floor = await launchFloor(Math.max(...counts));
  console.log(`[tree-curve] launch floor: ${floor.count} agentctl+agent pairs in ${f(floor.ms)} ms, ${f(floor.perSec, 1)}/s`);
}
const teardown = process.env.BENCH_TEARDOWN_FLOOR === '0' ? [] : counts.map(teardownFloor).filter((t): t is TeardownFloor => t !== null);
for (const t of teardown)
  console.log(`[tree-curve] teardown floor: ${t.n} pairs, agents gone ${t.agents_gone_ms} ms, all exited ${t.wall_ms} ms, ${t.teardown_cpu_ms} ms CPU`);
if (write) {
  const path = record.write(figuresOf(points, floor, teardown), { notes: [label], details: { launch_workers: LAUNCH_WORKERS, points } });
  renderTables();
  console.log(`[tree-curve] wrote ${path}`);
}
process.exit(0);
