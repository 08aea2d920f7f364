import postgres from 'postgres';
import { Holds } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import type { Scenario } from '../scenario.js';
import { e2eIterations, samples, startBenchStack, summarize } from '../e2e.js';

/**
 * on a big tree: 10,000 tasks with 1,000,000 cost events (seeded in the holds schema as the
 * service records them: events plus per-task rollups), summarised through the gateway and over NATS.
 */
const TASKS = Number(process.env.BENCH_COST_TASKS ?? 10_000);
const EVENTS = Number(process.env.BENCH_COST_EVENTS ?? 1_000_000);

const scenario: Scenario = {
  name: 'tree cost summary',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const b = await startBenchStack();
    ctx.defer(() => b.stop());
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;
    const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
    ctx.defer(() => sql.end());
    const t = performance.now();
    const [root] = await sql<{ id: string }[]>`
      WITH nodes AS (SELECT i, gen_random_uuid() AS id FROM generate_series(0, ${TASKS - 1}) AS i),
      ins AS (
        INSERT INTO holds.task_tree (task_id, workspace_id, parent_id)
        SELECT n.id, ${ws}, p.id FROM nodes n LEFT JOIN nodes p ON n.i > 0 AND p.i = (n.i - 1) / 10
        RETURNING task_id
      ) SELECT (SELECT id FROM nodes WHERE i = 0) AS id`;
    await sql`
      INSERT INTO holds.cost_events (id, task_id, usage_event_id, model, cost_cents, tokens_in, tokens_cached_in, tokens_out)
      SELECT gen_random_uuid(), t.task_id, 'bench-' || e, 'm', (e % 7) + 0.25, e % 1000, e % 100, e % 50
      FROM generate_series(1, ${EVENTS}) AS e
      JOIN (SELECT task_id, row_number() OVER (ORDER BY task_id) - 1 AS k FROM holds.task_tree) t ON t.k = e % ${TASKS}`;
    await sql`
      INSERT INTO holds.task_costs (task_id, events, cost_cents, tokens_in, tokens_cached_in, tokens_out)
      SELECT task_id, count(*), sum(cost_cents), sum(tokens_in), sum(tokens_cached_in), sum(tokens_out) FROM holds.cost_events GROUP BY task_id`;
    await sql`ANALYZE holds.task_tree`;
    await sql`ANALYZE holds.task_costs`;
    ctx.log(`seeded ${TASKS} tasks and ${EVENTS} cost events in ${((performance.now() - t) / 1000).toFixed(1)} s`);

    const [truth] = await sql<{ c: string }[]>`SELECT sum(cost_cents)::text AS c FROM holds.cost_events`;
    const summary = await b.api.ok('GET', `/tasks/${root!.id}/tree/cost-summary`);
    if (summary.task_count !== TASKS || Math.abs(summary.cost_cents - Number(truth!.c)) > 1e-6)
      throw new Error(`wrong summary ${JSON.stringify(summary)} vs ${truth!.c}`);

    const n = e2eIterations(300);
    const http = await samples(() => b.api.ok('GET', `/tasks/${root!.id}/tree/cost-summary`), n);
    const nats = await samples(() => request(b.nc, Holds.costSummary, { actor: { type: 'operator', id: 'bench', workspaces: ['*'] }, task_id: root!.id }), n);
    return [
      {
        id: 'tree.cost.nats.10k',
        label: `holds.cost.summary over NATS, ${TASKS} tasks, ${EVENTS} cost events`,
        stats: summarize(nats),
        baseline: 'nats.request.helper',
      },
      {
        id: 'tree.cost.http.10k',
        label: `GET /tasks/:id/tree/cost-summary, same tree, through the gateway`,
        stats: summarize(http),
        baseline: 'nats.request.helper',
      },
    ];
  },
};
export default scenario;
