import { monotonicNow } from '@kandev/testkit/agents/events';
import { startBenchStack } from '../e2e.js';
import type { Figure } from '../results.js';
import { summarize } from '../stats.js';
import { curvePoint } from '../tree/curve.js';
import { StallLog } from './stalls.js';

/**
 * The tree pause of `live` live sessions (a 1,000-task tree each time, bench/src/tree/curve.ts), run
 * `runs` times in a row on one stack. Per run: the reply, whether every member was CANCELLED by it,
 * when every agent was gone, the `GET /sessions/:id` reads during the teardown, and each service's
 * event-loop delay from its stall recorder over the same window. A run that breaks (a member not
 * CANCELLED at the reply, an agent that never goes) is recorded as such and the next one runs.
 */
export const TREE_BOUNDS = { reply_ms: 1_500, agents_gone_ms: 2_000, reads_p99_ms: 250, loop_p99_ms: 20 };

export async function treeRuns(runs: number, live: number, log: (m: string) => void) {
  const b = await startBenchStack({ LAUNCH_TIMEOUT_MS: '60000', GATEWAY_REQUEST_TIMEOUT_MS: '90000' });
  const stalls = new StallLog(b);
  stalls.start(2_000);
  const out = [];
  try {
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'tails-tree' })).id as string;
    for (let i = 1; i <= runs; i++) {
      // The curve's window is CLOCK_MONOTONIC; the recorders' are epoch ms.
      const offset = performance.timeOrigin + performance.now() - monotonicNow();
      try {
        const p = await curvePoint(b, ws, live, (m) => log(`run ${i}: ${m}`));
        await stalls.poll();
        const loop = stalls.loopDelay(p.window[0] + offset, p.window[1] + offset);
        const loopWorst = Math.max(...Object.values(loop).map((l) => l.p99_ms));
        const run = {
          run: i,
          reply_ms: Math.round(p.replyMs),
          cancelled_ms: Math.round(p.cancelledMs),
          all_cancelled_by_reply: p.cancelledMs <= p.replyMs,
          agents_gone_ms: Math.round(p.agentsGoneMs),
          agentctls_gone_ms: Math.round(p.agentctlsGoneMs),
          reads: { n: p.reads.n, p50_ms: round1(p.reads.p50), p99_ms: round1(p.reads.p99), max_ms: round1(p.reads.max), failed: p.readFailures },
          loop_delay: loop,
          launch_per_s: round1(p.launchPerSec),
          error: null as string | null,
          meets_bounds: false,
        };
        run.meets_bounds =
          run.reply_ms <= TREE_BOUNDS.reply_ms &&
          run.all_cancelled_by_reply &&
          run.agents_gone_ms <= TREE_BOUNDS.agents_gone_ms &&
          run.reads.p99_ms <= TREE_BOUNDS.reads_p99_ms &&
          loopWorst < TREE_BOUNDS.loop_p99_ms;
        out.push(run);
      } catch (e) {
        log(`run ${i} failed: ${(e as Error).message}`);
        out.push({ run: i, error: (e as Error).message, meets_bounds: false });
      }
    }
  } finally {
    await stalls.stop().catch(() => undefined);
    await b.stop();
  }
  return out;
}

const round1 = (x: number) => Math.round(x * 10) / 10;

type TreeRun = Awaited<ReturnType<typeof treeRuns>>[number];
type CompletedRun = Extract<TreeRun, { reply_ms: number }>;

/**
 * The runs' figures: `tree.runs` (how many met every bound), then one figure per measure, each
 * summarizing its value over the runs that completed (one sample = one run) with its bound and how
 * many runs stayed within it: `tree.reply`, `tree.cancelled`, `tree.agents-gone`,
 * `tree.agentctls-gone`, `tree.reads.p50|p99|max`, `tree.launch-per-s`, `tree.loop-p99.<service>`,
 * `tree.loop-max.<service>`. The runs themselves go under `details`.
 */
export function treeFigures(runs: TreeRun[], live: number): Figure[] {
  const done = runs.filter((r): r is CompletedRun => 'reply_ms' in r && r.error === null);
  const what = `the pause of a 1,000-task tree with ${live} live sessions, one run`;
  const series = (id: string, label: string, xs: number[], bound?: { ms: number; strict?: boolean }, unit?: string): Figure[] => {
    const ok = xs.filter(Number.isFinite);
    if (ok.length === 0) return [];
    const within = bound && ok.filter((x) => (bound.strict ? x < bound.ms : x <= bound.ms)).length;
    return [{ id, label, ...(unit ? { unit } : {}), ...summarize(ok), ...(bound ? { bound: bound.ms, within_bound: within } : {}) }];
  };
  const services = [...new Set(done.flatMap((r) => Object.keys(r.loop_delay)))];
  return [
    {
      id: 'tree.runs',
      label: `runs of ${what.replace(', one run', '')} in a row on one stack`,
      unit: 'runs',
      runs: runs.length,
      completed: done.length,
      meeting_bounds: runs.filter((r) => r.meets_bounds).length,
      all_cancelled_by_reply: done.filter((r) => r.all_cancelled_by_reply).length,
      reads_failed: done.reduce((s, r) => s + r.reads.failed, 0),
    },
    ...series(
      'tree.reply',
      `reply of ${what}`,
      done.map((r) => r.reply_ms),
      { ms: TREE_BOUNDS.reply_ms },
    ),
    ...series(
      'tree.cancelled',
      `every member CANCELLED, from the request, ${what}`,
      done.map((r) => r.cancelled_ms),
    ),
    ...series(
      'tree.agents-gone',
      `every agent gone, from the request, ${what}`,
      done.map((r) => r.agents_gone_ms),
      { ms: TREE_BOUNDS.agents_gone_ms },
    ),
    ...series(
      'tree.agentctls-gone',
      `every agentctl gone, from the request, ${what}`,
      done.map((r) => r.agentctls_gone_ms),
    ),
    ...series(
      'tree.reads.p50',
      `p50 of the GET /sessions/:id reads during the teardown, ${what}`,
      done.map((r) => r.reads.p50_ms),
    ),
    ...series(
      'tree.reads.p99',
      `p99 of the GET /sessions/:id reads during the teardown, ${what}`,
      done.map((r) => r.reads.p99_ms),
      { ms: TREE_BOUNDS.reads_p99_ms },
    ),
    ...series(
      'tree.reads.max',
      `slowest GET /sessions/:id read during the teardown, ${what}`,
      done.map((r) => r.reads.max_ms),
    ),
    ...series(
      'tree.launch-per-s',
      `sessions launched per second before the pause, ${what}`,
      done.map((r) => r.launch_per_s),
      undefined,
      'sessions/s',
    ),
    ...services.flatMap((s) =>
      series(
        `tree.loop-p99.${s}`,
        `event-loop delay p99 of the ${s} service (its 100 ms windows' maxima) over the teardown, ${what}`,
        done.map((r) => r.loop_delay[s]?.p99_ms ?? Number.NaN),
        {
          ms: TREE_BOUNDS.loop_p99_ms,
          strict: true,
        },
      ),
    ),
    ...services.flatMap((s) =>
      series(
        `tree.loop-max.${s}`,
        `largest event-loop delay of the ${s} service over the teardown, ${what}`,
        done.map((r) => r.loop_delay[s]?.max_ms ?? Number.NaN),
      ),
    ),
  ];
}
