import type { Scenario, ScenarioResult } from '../scenario.js';
import { startBenchStack, summarize } from '../e2e.js';
import { curvePoint } from '../tree/curve.js';

/**
 * The tree-hold curve (tree/curve.ts): a pause of a 1,000-task tree with 10, 50, 100 and 200 live
 * scripted sessions (`BENCH_TREE_CURVE`): reply, all CANCELLED, every agent and agentctl gone, and
 * GET /sessions/:id sampled throughout. `npm run bench:tree-curve` runs it alone and writes
 * bench/results/tree-curve.json (TREE-CURVE.md).
 */
const counts = (process.env.BENCH_TREE_CURVE ?? '10,50,100,200').split(',').map(Number);

const scenario: Scenario = {
  name: 'tree hold curve',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const b = await startBenchStack({ LAUNCH_TIMEOUT_MS: '60000', GATEWAY_REQUEST_TIMEOUT_MS: '90000' });
    ctx.defer(() => b.stop());
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;
    const results: ScenarioResult[] = [];
    for (const n of counts) {
      const p = await curvePoint(b, ws, n, ctx.log);
      const one = (x: number) => summarize([x]);
      results.push(
        { id: `tree.curve.${n}.reply`, label: `POST tree/pause, 1,000 tasks, ${n} live sessions: reply (all CANCELLED by then)`, stats: one(p.replyMs) },
        { id: `tree.curve.${n}.agents_gone`, label: `same: until every agent process is gone`, stats: one(p.agentsGoneMs) },
        { id: `tree.curve.${n}.agentctls_gone`, label: `same: until every agentctl process is gone`, stats: one(p.agentctlsGoneMs) },
        {
          id: `tree.curve.${n}.reads`,
          label: `same: GET /sessions/:id one at a time (every 20 ms at most) from the request until all are gone`,
          stats: p.reads,
        },
        {
          id: `tree.curve.${n}.launch_rate`,
          label: `${n} sessions launched through the API, 8 callers: sessions per second (not ms)`,
          stats: one(p.launchPerSec),
        },
      );
    }
    return results;
  },
};
export default scenario;
