// `npm run bench:tails` (issue #58, docs/fast-paths.md "Tails"): the tails of stop and cancel, and
// the tree pause run after run. Writes, through bench/src/results.ts, bench/results/tails-tree.json
// (the pool and tree parts) and bench/results/tails-calls.json (the calls part); TAILS_DIR writes
// them into another directory. The parts run in this order: pool, tree, calls.
//
//   TAILS_CALLS=1000        stops and as many cancels per stack and background level
//   TAILS_BACKGROUND=0,20   other agents running meanwhile (each writes a line a second)
//   TAILS_BASELINE_ROOT=dir a built checkout to compare with: its stack takes turns with this one,
//                           TAILS_BLOCK (20) calls of each kind at a time
//   TAILS_TREE_RUNS=10      consecutive tree pauses of TAILS_TREE_LIVE (100) live sessions
//   TAILS_PARTS=pool,calls,tree  which parts run (pool: a caller assertion's verify with libuv's pool busy)
import { startBenchStack, type BenchStack } from '../e2e.js';
import { beginResult, renderTables, type Figure } from '../results.js';
import { startSpanCollector } from '../spans.js';
import { SpanIndex } from './breakdown.js';
import { Callers, type Call } from './calls.js';
import { CALL_BOUNDS, callGroup, dirtyNote, groupId, SLOW_MS, withBaselines, type CallGroup } from './report.js';
import { cryptoPool } from './crypto-pool.js';
import { StallLog } from './stalls.js';
import { TREE_BOUNDS, treeFigures, treeRuns } from './tree.js';

const env = process.env;
const dir = env.TAILS_DIR;
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
const seconds = (since: number) => Math.round((Date.now() - since) / 1000);

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
  const roots: Array<[string, string | undefined]> = [['this', undefined], ...(baselineRoot ? [['baseline', baselineRoot] as [string, string]] : [])];
  const stacks: StackUnderTest[] = [];
  const calls: Call[] = [];
  const failures: Array<{ stack: string; kind: Call['kind']; background: number; error: string }> = [];
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
    const groups: CallGroup[] = [];
    for (const s of stacks)
      for (const background of backgrounds)
        for (const kind of ['stop', 'cancel'] as const) {
          const group = calls.filter((c) => c.stack === s.label && c.background === background && c.kind === kind);
          const failed = failures.filter((f) => f.stack === s.label && f.background === background && f.kind === kind).length;
          if (group.length) groups.push(callGroup(group, spans, s.stalls, failed));
        }
    return { groups, failures };
  } finally {
    for (const s of stacks) await s.callers.close().catch(() => undefined);
    for (const s of stacks) await s.b.stop();
    await collector.stop();
  }
}

const notes = dirtyNote();
const written: string[] = [];
if (parts.has('pool') || parts.has('tree')) {
  const started = Date.now();
  const record = beginResult({
    name: 'tails-tree',
    title: "Tails: the tree pause run after run, and a caller assertion's verify with libuv's pool busy",
    command,
    ...(dir ? { dir } : {}),
  });
  const figures: Figure[] = [];
  const details: Record<string, unknown> = {};
  if (parts.has('pool')) {
    const pool = await cryptoPool();
    figures.push(...pool);
    for (const f of pool) log(`${f.id}: p50 ${Number(f.p50).toFixed(3)} p99 ${Number(f.p99).toFixed(3)} max ${Number(f.max).toFixed(3)} ms`);
  }
  if (parts.has('tree')) {
    const runs = await treeRuns(treeRunCount, treeLive, log);
    figures.push(...treeFigures(runs, treeLive));
    Object.assign(details, { live: treeLive, bounds: TREE_BOUNDS, runs_meeting_bounds: runs.filter((r) => r.meets_bounds).length, runs });
    log(`tree pause: ${runs.filter((r) => r.meets_bounds).length} of ${runs.length} runs met every bound`);
  }
  details.wall_s = seconds(started);
  written.push(record.write(figures, { notes, details }));
}
if (parts.has('calls')) {
  const started = Date.now();
  const record = beginResult({
    name: 'tails-calls',
    title: "Tails: stops and cancels, every call, with each slow call's trace and stalls",
    command,
    ...(dir ? { dir } : {}),
  });
  const { groups, failures } = await callsPart();
  for (const { figure: g } of groups)
    log(
      `${g.id}: n ${g.n} p50 ${Number(g.p50).toFixed(2)} p90 ${Number(g.p90).toFixed(2)} p99 ${Number(g.p99).toFixed(2)} max ${Number(g.max).toFixed(2)} ms; over ${SLOW_MS} ms: ${g.over_slow_ms} (${(g.slowest_five_ms as number[]).join(', ')})`,
    );
  const slow = Object.fromEntries(groups.filter((g) => g.slow.length).map((g) => [g.figure.id, g.slow]));
  const details = {
    slow_ms: SLOW_MS,
    bounds: CALL_BOUNDS,
    slow,
    failures: failures.map((f) => ({ id: groupId(f.kind, f.background, f.stack), error: f.error })),
    wall_s: seconds(started),
  };
  written.push(record.write(withBaselines(groups), { notes, details }));
}
if (!dir && written.length) renderTables();
for (const path of written) log(`wrote ${path}`);
process.exit(0);
