// B-8 tree budgets, measured on a whole stack (npm run build first):
//   node bench/dist/budget/run.js        (BENCH_BUDGET_ITERATIONS, BENCH_BUDGET_LIVE, BENCH_BUDGET_RUNS; BENCH_WRITE=0 prints only)
// Writes bench/results/budget.json: what the budget check costs a cost event (p50/p99 with and without a
// budget on the event's tree, interleaved in the same run), and the time from the cost event that
// crosses the cap to every agent of a live tree gone.
import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { Budget, Holds } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { eventually, processAlive } from '@kandev/testkit';
import { startBenchStack, type BenchStack } from '../e2e.js';
import { summarize, type Stats } from '../stats.js';
import { against, beginResult, renderTables, type Figure } from '../results.js';

const ITERATIONS = Number(process.env.BENCH_BUDGET_ITERATIONS ?? 1000);
/** Live agents in the tree of the crossing runs, one or more sizes (`10,30`). */
const LIVE = (process.env.BENCH_BUDGET_LIVE ?? '10,30').split(',').map(Number);
const RUNS = Number(process.env.BENCH_BUDGET_RUNS ?? 3);
const write = process.env.BENCH_WRITE !== '0';
const operator = { type: 'operator' as const, id: 'bench', workspaces: ['*'] };
const log = (m: string) => process.stderr.write(`[budget] ${m}\n`);

/** A tree of `n` tasks (fan-out 10) written into the holds service's projection, as cost events leave it. */
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

/** The cases interleaved call by call (a, b, c, d, a, b, ...), so the machine's noise falls on each alike. */
async function interleaved(ops: Record<string, () => Promise<unknown>>, iterations: number, warmup: number): Promise<Record<string, Stats>> {
  const names = Object.keys(ops);
  const out = Object.fromEntries(names.map((n) => [n, [] as number[]]));
  for (let i = 0; i < warmup + iterations; i++) {
    for (const n of names) {
      const t = performance.now();
      await ops[n]!();
      if (i >= warmup) out[n]!.push(performance.now() - t);
    }
  }
  return Object.fromEntries(names.map((n) => [n, summarize(out[n]!)]));
}

async function ingestion(b: BenchStack) {
  const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench budget' })).id as string;
  const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
  try {
    const plain = await seedProjection(sql, ws, 1000);
    const small = await seedProjection(sql, ws, 10);
    const mid = await seedProjection(sql, ws, 100);
    const big = await seedProjection(sql, ws, 1000);
    await sql`ANALYZE holds.task_tree`;
    await sql`ANALYZE holds.task_costs`;
    // Caps far above anything the run spends: every event takes the check, none crosses.
    await request(b.nc, Budget.set, { actor: operator, task_id: small.root, limit_cents: 1e12 });
    await request(b.nc, Budget.set, { actor: operator, task_id: mid.root, limit_cents: 1e12 });
    await request(b.nc, Budget.set, { actor: operator, task_id: big.root, limit_cents: 1e12 });
    const stats = await interleaved(
      {
        'cost_event.no_budget.1000': costEvent(b, plain.leaf),
        'cost_event.budget.10': costEvent(b, small.leaf),
        'cost_event.budget.100': costEvent(b, mid.leaf),
        'cost_event.budget.1000': costEvent(b, big.leaf),
      },
      ITERATIONS,
      Math.max(50, ITERATIONS / 10),
    );
    // What B-8 adds to an event of a tree without a budget: the probe statement alone, beside a bare round trip.
    const probe = `SELECT b.task_id FROM holds.task_tree t JOIN holds.tree_budgets b ON b.task_id = t.root_id WHERE t.task_id = $1 FOR UPDATE OF b`;
    const statements = await interleaved(
      {
        'pg.select_1': () => sql`SELECT 1`,
        'pg.budget_probe.no_budget': () => sql.unsafe(probe, [plain.leaf], { prepare: true }),
      },
      ITERATIONS,
      Math.max(50, ITERATIONS / 10),
    );
    return {
      statements: {
        what: 'the one statement B-8 adds to every cost event (the budget probe, on a tree with none) beside a bare SELECT 1, on one PostgreSQL connection, interleaved',
        stats: statements,
      },
      what: 'holds.cost.record over NATS (as POST /cost-events reaches the holds service), one call at a time, the four cases interleaved call by call',
      cases: {
        'cost_event.no_budget.1000': 'a leaf of a 1,000-task tree with no budget: the check is one index probe that finds none',
        'cost_event.budget.10': 'a leaf of a 10-task tree with a budget (never crossed): budget row locked, tree cost recomputed, state unchanged',
        'cost_event.budget.100': 'a leaf of a 100-task tree with a budget (never crossed): the same, over 100 tasks',
        'cost_event.budget.1000': 'a leaf of a 1,000-task tree with a budget (never crossed): the same, over 1,000 tasks',
      },
      stats,
    };
  } finally {
    await sql.end();
  }
}

/** A root with `live` children each running a scripted agent; the cost event that reaches the cap; until every agent is gone. */
async function crossingToAgentsGone(b: BenchStack, live: number) {
  const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench budget live' })).id as string;
  const root = (await b.api.ok('POST', '/tasks', { workspace_id: ws, title: 'budget root' })).id as string;
  const kids: string[] = [];
  for (let i = 0; i < live; i++) kids.push((await b.api.ok('POST', '/tasks', { workspace_id: ws, parent_id: root, title: `kid ${i}` })).id);
  const sessions: string[] = [];
  for (const k of kids) sessions.push((await b.api.ok('POST', `/tasks/${k}/sessions`, { prompt: JSON.stringify({ script: [{ sleep_ms: 600_000 }] }) })).id);
  const pids = await Promise.all(
    sessions.map((s) => eventually(async () => (await b.api.get(`/sessions/${s}`)).body.execution?.pid as number | undefined, 60_000)),
  );
  await b.api.ok('PUT', `/tasks/${root}/tree/budget`, { limit_cents: 100 });
  const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
  try {
    const t0 = performance.now();
    await b.api.ok('POST', '/cost-events', {
      task_id: kids[0],
      usage_event_id: randomUUID(),
      cost_cents: 100,
      tokens_in: 1,
      tokens_cached_in: 0,
      tokens_out: 1,
    });
    const replyMs = performance.now() - t0;
    let cancelledMs: number | null = null;
    let goneMs: number | null = null;
    while (goneMs === null) {
      if (cancelledMs === null) {
        const [c] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM orchestrator.sessions WHERE id = ANY(${sessions}) AND state = 'CANCELLED'`;
        if (c!.n === live) cancelledMs = performance.now() - t0;
      }
      if (pids.every((p) => !processAlive(p))) goneMs = performance.now() - t0;
      else if (performance.now() - t0 > 120_000) throw new Error('agents still alive after 120 s');
      else await new Promise((r) => setTimeout(r, 5));
    }
    // The budget records its hold once the pause has answered (up to its 1 s propagation wait).
    await eventually(async () => (await b.api.ok('GET', `/tasks/${root}/tree/budget`)).hold_id, 30_000);
    return { live, cost_event_reply_ms: replyMs, all_sessions_cancelled_ms: cancelledMs ?? goneMs, all_agents_gone_ms: goneMs };
  } finally {
    await sql.end();
  }
}

const record = beginResult({
  name: 'budget',
  title: 'Budget: what the check adds to a cost event, and a crossing until the agents are gone',
  command: 'npm run build && node bench/dist/budget/run.js',
});
const b = await startBenchStack();
try {
  log(`ingestion: ${ITERATIONS} interleaved calls per case`);
  const ing = await ingestion(b);
  for (const [k, s] of Object.entries({ ...ing.stats, ...ing.statements.stats })) log(`${k}: p50 ${s.p50.toFixed(2)} ms, p99 ${s.p99.toFixed(2)} ms`);
  const crossings = [];
  for (const live of LIVE)
    for (let r = 0; r < RUNS; r++) {
      const c = await crossingToAgentsGone(b, live);
      log(`crossing → ${live} agents gone: ${JSON.stringify(c)}`);
      crossings.push(c);
    }
  const pgFloor = ing.statements.stats['pg.select_1']!;
  const noBudget = ing.stats['cost_event.no_budget.1000']!;
  const figures: Figure[] = [
    ...Object.entries(ing.statements.stats).map(([id, s]) => ({
      id,
      label: id === 'pg.select_1' ? 'a bare SELECT 1 on one PostgreSQL connection (interleaved with the probe)' : ing.statements.what,
      ...s,
      ...(id === 'pg.select_1' ? {} : against(s, 'pg.select_1', pgFloor)),
    })),
    ...Object.entries(ing.stats).map(([id, s]) => ({
      id,
      label: `holds.cost.record over NATS: ${ing.cases[id as keyof typeof ing.cases]}`,
      ...s,
      ...(id === 'cost_event.no_budget.1000' ? {} : against(s, 'cost_event.no_budget.1000', noBudget)),
    })),
    ...crossings.map((c, i) => ({
      id: `crossing.${c.live}.run${(i % RUNS) + 1}`,
      label: `a cost event crossing the cap of a root with ${c.live} live children, run ${(i % RUNS) + 1}`,
      live: c.live,
      reply_ms: c.cost_event_reply_ms,
      cancelled_ms: c.all_sessions_cancelled_ms,
      agents_gone_ms: c.all_agents_gone_ms,
    })),
  ];
  const notes = [
    'The four ingestion cases are interleaved call by call, so their difference is the check, not the load.',
    'crossing: POST /cost-events that reaches the cap of a root with `live` children each running a scripted agent: the reply, every session CANCELLED (polled in the database every 5 ms), every agent process gone',
  ];
  if (write) {
    log(`wrote ${record.write(figures, { notes })}`);
    renderTables();
  } else process.stdout.write(JSON.stringify(figures, null, 2) + '\n');
} finally {
  await b.stop();
}
