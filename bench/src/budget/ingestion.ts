import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { Budget, Holds } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import type { BenchStack } from '../e2e.js';
import { summarize } from '../stats.js';
import { interleaved, log, ratio } from './common.js';

const operator = { type: 'operator' as const, id: 'bench', workspaces: ['*'] };

/** A tree of `n` tasks (fan-out 10) written into the holds service's projection, each task with a cost, as cost events leave it. */
async function seedProjection(sql: postgres.Sql, workspaceId: string, n: number): Promise<{ root: string; leaf: string }> {
  const [row] = await sql<{ root: string; leaf: string }[]>`
    WITH nodes AS (SELECT i, gen_random_uuid() AS id FROM generate_series(0, ${n - 1}) AS i),
    ins AS (
      INSERT INTO holds.task_tree (task_id, workspace_id, parent_id, root_id)
      SELECT n.id, ${workspaceId}, p.id, (SELECT id FROM nodes WHERE i = 0) FROM nodes n LEFT JOIN nodes p ON n.i > 0 AND p.i = (n.i - 1) / 10
      RETURNING task_id
    ), costs AS (
      INSERT INTO holds.task_costs (task_id, events, cost_cents, tokens_in, tokens_cached_in, tokens_out)
      SELECT id, 1, 1, 1, 0, 1 FROM nodes RETURNING task_id
    )
    SELECT (SELECT id FROM nodes WHERE i = 0) AS root, (SELECT id FROM nodes WHERE i = ${n - 1}) AS leaf, (SELECT count(*) FROM ins) + (SELECT count(*) FROM costs) AS c`;
  return row!;
}

const costEvent = (b: BenchStack, taskId: string) => () =>
  request(b.nc, Holds.costRecord, {
    actor: operator,
    task_id: taskId,
    usage_event_id: randomUUID(),
    cost_cents: 0.01,
    tokens_in: 1,
    tokens_cached_in: 0,
    tokens_out: 1,
  });

// The two checks as SQL, as services/holds/src/store/{budgets,costs}.ts send them. Before ADR 0078:
// the budget row locked, then the tree's cost recounted under that lock. After: the tree's shared
// spend lock, then the event's cost added to the budget's running total (the row lock, by primary key).
const PROBE_FOR_UPDATE = `SELECT b.task_id FROM holds.task_tree t JOIN holds.tree_budgets b ON b.task_id = t.root_id WHERE t.task_id = $1 FOR UPDATE OF b`;
const RECOUNT = `WITH RECURSIVE tree AS (
    SELECT task_id FROM holds.task_tree WHERE task_id = $1
    UNION ALL SELECT c.task_id FROM holds.task_tree c JOIN tree ON c.parent_id = tree.task_id)
  SELECT count(*) FILTER (WHERE c.events > 0)::int, COALESCE(sum(c.cost_cents), 0), COALESCE(sum(c.tokens_in), 0), COALESCE(sum(c.tokens_cached_in), 0),
         COALESCE(sum(c.tokens_out), 0), COALESCE(sum(c.unpriced_events), 0)
  FROM tree JOIN holds.task_costs c ON c.task_id = tree.task_id`;
const SPEND_LOCK = `SELECT root_id, pg_advisory_xact_lock_shared(hashtextextended('kandev.budget-spend:' || root_id::text, 0)) FROM holds.task_tree WHERE task_id = $1`;
const ADD_TO_TOTAL = `UPDATE holds.tree_budgets SET spent_cents = spent_cents + 0 WHERE task_id = $1 RETURNING task_id`;

type Tree = { root: string; leaf: string };
const recountCheck = (sql: postgres.Sql, t: Tree) => () =>
  sql.begin(async (tx) => {
    await tx.unsafe(PROBE_FOR_UPDATE, [t.leaf], { prepare: true });
    await tx.unsafe(RECOUNT, [t.root], { prepare: true });
  });
const runningTotalCheck = (sql: postgres.Sql, t: Tree) => () =>
  sql.begin(async (tx) => {
    await tx.unsafe(SPEND_LOCK, [t.leaf], { prepare: true });
    await tx.unsafe(ADD_TO_TOTAL, [t.root], { prepare: true });
  });

/** `callers` connections each running `op` back to back for `perCaller` calls: per-call latency and calls per second. */
async function concurrent(pool: postgres.Sql, op: () => Promise<unknown>, callers: number, perCaller: number) {
  const lat: number[] = [];
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      for (let i = 0; i < perCaller; i++) {
        const t = performance.now();
        await op();
        lat.push(performance.now() - t);
      }
    }),
  );
  return { wall_ms: performance.now() - t0, latency: lat };
}

/**
 * The budget check on cost-event ingestion. (1) Whole events over NATS (holds.cost.record, as POST
 * /cost-events reaches the holds service), one at a time, cases interleaved: no budget, and budgets
 * on trees of 10 to 5,000 tasks. (2) The check alone in SQL, before (recount) and after (running
 * total) ADR 0078, interleaved on one connection, beside a bare transaction. (3) The same two checks
 * from 20 concurrent connections on one budgeted 5,000-task tree, in alternating blocks: the row
 * lock serialises a tree's events, so what each holds it for bounds the tree's event rate.
 */
export async function ingestion(b: BenchStack, iterations: number) {
  const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench budget' })).id as string;
  const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
  const pool = postgres(b.stack.db.url, { max: 20, onnotice: () => undefined });
  try {
    const plain = await seedProjection(sql, ws, 1000);
    const trees = { 10: await seedProjection(sql, ws, 10), 1000: await seedProjection(sql, ws, 1000), 5000: await seedProjection(sql, ws, 5000) };
    await sql`ANALYZE holds.task_tree`;
    await sql`ANALYZE holds.task_costs`;
    // Caps far above anything the run spends: every event takes the check, none crosses.
    for (const t of Object.values(trees)) await request(b.nc, Budget.set, { actor: operator, task_id: t.root, limit_cents: 1e12 });
    const warmup = Math.max(50, iterations / 10);
    log(`ingestion: ${iterations} interleaved events per case`);
    const events = await interleaved(
      {
        'cost_event.no_budget.1000': costEvent(b, plain.leaf),
        'cost_event.budget.10': costEvent(b, trees[10].leaf),
        'cost_event.budget.1000': costEvent(b, trees[1000].leaf),
        'cost_event.budget.5000': costEvent(b, trees[5000].leaf),
      },
      iterations,
      warmup,
    );
    log('ingestion: the check alone, recount vs running total');
    const checks = await interleaved(
      {
        'pg.begin_select_1_commit': () => sql.begin((tx) => tx`SELECT 1`),
        'check.recount.10': recountCheck(sql, trees[10]),
        'check.recount.1000': recountCheck(sql, trees[1000]),
        'check.recount.5000': recountCheck(sql, trees[5000]),
        'check.running_total.10': runningTotalCheck(sql, trees[10]),
        'check.running_total.1000': runningTotalCheck(sql, trees[1000]),
        'check.running_total.5000': runningTotalCheck(sql, trees[5000]),
      },
      iterations,
      warmup,
    );
    log('ingestion: 20 concurrent checks on one 5,000-task tree');
    const perCaller = Math.max(10, Math.round(iterations / 40));
    const blocks: Record<'recount' | 'running_total', { wall_ms: number; latency: number[] }[]> = { recount: [], running_total: [] };
    for (let r = 0; r < 4; r++) {
      blocks.recount.push(await concurrent(pool, recountCheck(pool, trees[5000]), 20, perCaller));
      blocks.running_total.push(await concurrent(pool, runningTotalCheck(pool, trees[5000]), 20, perCaller));
    }
    const summarizeBlocks = (xs: { wall_ms: number; latency: number[] }[]) => ({
      checks_per_s: (xs.length * 20 * perCaller) / (xs.reduce((s, x) => s + x.wall_ms, 0) / 1000),
      latency: summarize(xs.flatMap((x) => x.latency)),
    });
    const concurrency = {
      callers: 20,
      calls_per_caller_per_block: perCaller,
      blocks: 4,
      recount: summarizeBlocks(blocks.recount),
      running_total: summarizeBlocks(blocks.running_total),
    };
    return {
      events: {
        what: 'holds.cost.record over NATS, one call at a time, the four cases interleaved call by call (after ADR 0078: the running total)',
        stats: events,
        ratios: {
          'budget.5000_vs_no_budget': ratio(events['cost_event.budget.5000']!, events['cost_event.no_budget.1000']!),
          'budget.5000_vs_budget.10': ratio(events['cost_event.budget.5000']!, events['cost_event.budget.10']!),
        },
      },
      checks: {
        what: 'the budget check alone as one transaction on one connection, interleaved: recount = the budget row locked, then the tree recounted (before ADR 0078); running_total = the shared spend lock, then the cost added by primary key (after); beside BEGIN; SELECT 1; COMMIT',
        stats: checks,
        ratios: Object.fromEntries(
          ([10, 1000, 5000] as const).map((n) => [`recount_vs_running_total.${n}`, ratio(checks[`check.recount.${n}`]!, checks[`check.running_total.${n}`]!)]),
        ),
      },
      concurrency: {
        what: '20 connections checking the same budgeted 5,000-task tree at once, blocks of each check alternating: the tree events one budget row lock admits per second',
        ...concurrency,
        throughput_ratio: concurrency.running_total.checks_per_s / concurrency.recount.checks_per_s,
      },
    };
  } finally {
    await sql.end();
    await pool.end();
  }
}
