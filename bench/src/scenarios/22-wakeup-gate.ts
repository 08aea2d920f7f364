import postgres from 'postgres';
import type { Scenario } from '../scenario.js';
import { startBenchStack, summarize } from '../e2e.js';
import { heldWakeups } from '../wakeups.js';

/**
 * throughput: how fast one holds replica finishes queued wakeups of held tasks (claim and
 * gate in one statement, nothing launched). The queue is filled in one insert, then drained.
 */
const WAKEUPS = Number(process.env.BENCH_GATE_WAKEUPS ?? 20_000);

const scenario: Scenario = {
  name: 'wakeup gate throughput',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const b = await startBenchStack({ WAKEUP_BATCH: process.env.BENCH_GATE_BATCH ?? '200' });
    ctx.defer(() => b.stop());
    const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
    ctx.defer(() => sql.end());
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;
    const wakeups = await heldWakeups(sql, ws, WAKEUPS);
    const t0 = performance.now();
    await wakeups.queue();
    const samples: number[] = [];
    let last = performance.now();
    let lastLeft = WAKEUPS;
    for (;;) {
      const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM holds.wakeups WHERE status = 'queued'`;
      const now = performance.now();
      if (row!.n < lastLeft) {
        samples.push((now - last) / (lastLeft - row!.n));
        last = now;
        lastLeft = row!.n;
      }
      if (row!.n === 0) break;
      if (now - t0 > 300_000) throw new Error('gate drain did not finish in 5 min');
      await new Promise((r) => setTimeout(r, 100));
    }
    const total = performance.now() - t0;
    const [wrong] = await sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM holds.wakeups WHERE status <> 'finished' OR skip_reason IS DISTINCT FROM 'tree_paused'`;
    if (wrong!.n !== 0) throw new Error(`${wrong!.n} wakeups not gated`);
    ctx.log(`${WAKEUPS} gated wakeups in ${total.toFixed(0)} ms: ${((WAKEUPS / total) * 1000).toFixed(0)}/s`);
    return [
      {
        id: 'wakeup.gate.per_wakeup',
        label: `ms per gated wakeup while ${WAKEUPS} drain (per 100 ms poll; total ${(total / 1000).toFixed(1)} s = ${((WAKEUPS / total) * 1000).toFixed(0)} wakeups/s)`,
        stats: summarize(samples),
      },
    ];
  },
};
export default scenario;
