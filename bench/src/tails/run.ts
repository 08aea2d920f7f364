// `npm run bench:tails` (issue #58, docs/fast-paths.md "Tails"): the tails of stop and cancel, and
// the tree pause run after run. Writes bench/results/tails.json (TAILS_OUT to write elsewhere).
//
//   TAILS_CALLS=1000        stops and as many cancels per stack and background level
//   TAILS_BACKGROUND=0,20   other agents running meanwhile (each writes a line a second)
//   TAILS_BASELINE_ROOT=dir a built checkout to compare with: its stack takes turns with this one,
//                           TAILS_BLOCK (20) calls of each kind at a time
//   TAILS_TREE_RUNS=10      consecutive tree pauses of TAILS_TREE_LIVE (100) live sessions
//   TAILS_PARTS=pool,calls,tree  which parts run (pool: a caller assertion's verify with libuv's pool busy)
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBenchStack, type BenchStack } from '../e2e.js';
import { startSpanCollector } from '../spans.js';
import { SpanIndex } from './breakdown.js';
import { Callers, type Call } from './calls.js';
import { callGroup, gitCommit, machine, SLOW_MS } from './report.js';
import { cryptoPool } from './crypto-pool.js';
import { StallLog } from './stalls.js';
import { TREE_BOUNDS, treeRuns } from './tree.js';

const env = process.env;
const benchDir = fileURLToPath(new URL('../..', import.meta.url));
const out = env.TAILS_OUT ?? join(benchDir, 'results/tails.json');
const callsPerGroup = Number(env.TAILS_CALLS ?? 1000);
const backgrounds = (env.TAILS_BACKGROUND ?? '0,20').split(',').map(Number);
const block = Number(env.TAILS_BLOCK ?? 20);
const baselineRoot = env.TAILS_BASELINE_ROOT;
const treeRunCount = Number(env.TAILS_TREE_RUNS ?? 10);
const treeLive = Number(env.TAILS_TREE_LIVE ?? 100);
const parts = new Set((env.TAILS_PARTS ?? 'pool,calls,tree').split(','));
const log = (m: string) => console.log(`[tails] ${new Date().toISOString().slice(11, 19)} ${m}`);

const command = [
  ...Object.entries(env)
    .filter(([k]) => k.startsWith('TAILS_'))
    .map(([k, v]) => `${k}=${v}`),
  'npm run bench:tails',
].join(' ');
const loadAtStart = loadavg();
const started = Date.now();

interface StackUnderTest {
  label: string;
  b: BenchStack;
  callers: Callers;
  stalls: StallLog;
}

async function callsPart() {
  const collector = await startSpanCollector();
  // Every service exports its spans to the bench, so each slow call's trace says where it went.
  const traced = { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '500' };
  const roots: Array<[string, string | undefined]> = [['current', undefined], ...(baselineRoot ? [['baseline', baselineRoot] as [string, string]] : [])];
  const stacks: StackUnderTest[] = [];
  const calls: Call[] = [];
  const failures: Array<{ stack: string; kind: string; background: number; error: string }> = [];
  try {
    for (const [label, root] of roots) {
      // A loaded machine can miss a service's start-up bound once: one more try before giving up.
      const b = await startBenchStack(traced, root ? { serviceRoot: root } : {}).catch((e: unknown) => {
        log(`${label} stack did not start (${String(e).split('\n')[0]}); trying once more`);
        return startBenchStack(traced, root ? { serviceRoot: root } : {});
      });
      const stalls = new StallLog(b);
      stalls.start();
      stacks.push({ label, b, callers: await Callers.open(label, b), stalls });
    }
    for (const background of backgrounds) {
      log(`${background} other agents: launching them`);
      const stoppers = await Promise.all(stacks.map((s) => s.callers.background(background)));
      // Turns: each stack runs `block` stops and `block` cancels (alternating), then the next stack.
      for (let done = 0, turn = 0; done < callsPerGroup; done += block, turn++) {
        for (let k = 0; k < stacks.length; k++) {
          const s = stacks[(k + turn) % stacks.length]!;
          for (let j = 0; j < Math.min(block, callsPerGroup - done); j++)
            for (const kind of ['stop', 'cancel'] as const) {
              // A call that fails (a launch the loaded machine did not finish in time) is counted, not fatal.
              try {
                calls.push(await s.callers[kind](background));
              } catch (e) {
                failures.push({ stack: s.label, kind, background, error: String(e).split('\n')[0]! });
                log(`${s.label} ${kind} failed: ${failures.at(-1)!.error}`);
              }
            }
        }
        log(`${background} other agents: ${Math.min(done + block, callsPerGroup)} of ${callsPerGroup} stops and cancels per stack`);
      }
      await Promise.all(stoppers.map((stop) => stop()));
    }
    // Spans leave the services in batches: the last ones are in after a couple of schedule delays.
    await new Promise((r) => setTimeout(r, 2_000));
    for (const s of stacks) await s.stalls.stop();
    const spans = new SpanIndex(collector.spans());
    const groups = [];
    for (const s of stacks)
      for (const background of backgrounds)
        for (const kind of ['stop', 'cancel'] as const) {
          const group = calls.filter((c) => c.stack === s.label && c.background === background && c.kind === kind);
          if (group.length) groups.push(callGroup(group, spans, s.stalls));
        }
    return { groups, failures };
  } finally {
    for (const s of stacks) await s.callers.close().catch(() => undefined);
    for (const s of stacks) await s.b.stop();
    await collector.stop();
  }
}

const result: Record<string, unknown> = { command, commit: gitCommit(), date: new Date().toISOString(), machine: machine(loadAtStart) };
if (parts.has('pool')) {
  result.pool = await cryptoPool();
  log(`caller assertion verify: ${JSON.stringify(result.pool)}`);
}
if (parts.has('calls')) {
  const { groups, failures } = await callsPart();
  result.calls = { slow_ms: SLOW_MS, bounds: 'p99 <= 3 x p50 and no call over slow_ms', groups, failures };
  for (const g of groups)
    log(
      `${g.stack} ${g.kind} bg ${g.background}: n ${g.n} p50 ${g.p50_ms} p90 ${g.p90_ms} p99 ${g.p99_ms} max ${g.max_ms} ms; over ${SLOW_MS} ms: ${g.over_slow_ms} (${g.slowest_five_ms.join(', ')})`,
    );
}
if (parts.has('tree')) {
  const runs = await treeRuns(treeRunCount, treeLive, log);
  result.tree = { live: treeLive, bounds: TREE_BOUNDS, runs_meeting_bounds: runs.filter((r) => r.meets_bounds).length, runs };
  log(`tree pause: ${runs.filter((r) => r.meets_bounds).length} of ${runs.length} runs met every bound`);
}
result.machine = machine(loadAtStart);
result.wall_s = Math.round((Date.now() - started) / 1000);
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, JSON.stringify(result, null, 2) + '\n');
log(`wrote ${out} (${result.wall_s} s)`);
process.exit(0);
