// B-8 tree budgets and the agent rate, measured on a whole stack (npm run build first):
//   node bench/dist/budget/run.js
//   BENCH_BUDGET_ITERATIONS (1000), BENCH_BUDGET_LIVE (100), BENCH_BUDGET_RUNS (5), BENCH_BUDGET_PARTS
//   (ingestion,rate,crossing), BENCH_WRITE=0 prints only.
// Writes bench/results/budget.json: the rate limiter's cost on the MCP stop (on and off, interleaved,
// against the raw floor); the budget check on cost-event ingestion (whole events, and the check alone
// before and after ADR 0078's running total); and the time from the cost event that crosses the cap
// to every agent of a live tree gone.
import { existsSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { beginResult, RESULT_FORMAT, resultsDir, renderTables, type Figure, type ResultFile } from '../results.js';
import { startBenchStack } from '../e2e.js';
import { log, spread } from './common.js';
import { crossingToAgentsGone } from './crossing.js';
import { ingestion } from './ingestion.js';
import { RATE_ON, rateLimiterCost } from './rate-limit.js';
import { figuresOf } from './figures.js';

const ITERATIONS = Number(process.env.BENCH_BUDGET_ITERATIONS ?? 1000);
const LIVE = Number(process.env.BENCH_BUDGET_LIVE ?? 100);
const RUNS = Number(process.env.BENCH_BUDGET_RUNS ?? 5);
const PARTS = new Set((process.env.BENCH_BUDGET_PARTS ?? 'ingestion,rate,crossing').split(','));
const write = process.env.BENCH_WRITE !== '0';

const load = () => loadavg().map((x) => Math.round(x * 100) / 100);
const record = beginResult({
  name: 'budget',
  title: 'Budgets and the agent rate: the rate limiter on the MCP stop, the budget check on cost events, a crossing until the agents are gone',
  command: 'npm run build && node bench/dist/budget/run.js',
});
const resultsFile = `${resultsDir}budget.json`;
// A run of some parts keeps the other parts' figures and details from the file; each part says, in
// its details, when and at what load it was measured.
const previous = existsSync(resultsFile) ? (JSON.parse(readFileSync(resultsFile, 'utf8')) as ResultFile) : undefined;
const parts: Record<string, unknown> = previous?.format === RESULT_FORMAT ? { ...((previous.details as { parts?: Record<string, unknown> }).parts ?? {}) } : {};
async function measured(key: string, fn: () => Promise<Record<string, unknown>>): Promise<void> {
  const at = { date: new Date().toISOString(), loadavg_at_start: load() };
  const out = await fn();
  parts[key] = { ...out, measured: { ...at, loadavg_at_end: load() } };
}

async function crossings() {
  const runs = [];
  for (let r = 0; r < RUNS; r++) {
    const c = await crossingToAgentsGone(b, LIVE);
    log(`crossing → ${LIVE} agents gone: ${JSON.stringify(c)} (load ${load().join(' ')})`);
    runs.push({ ...c, loadavg: load() });
  }
  return {
    what: `POST /cost-events that reaches the cap of a root with ${LIVE} children each running a scripted agent (a long turn): its reply, every session CANCELLED (polled in the database every 5 ms), every agent process gone (signal 0 every 5 ms); ${RUNS} runs, each on a fresh tree`,
    runs,
    spread_ms: {
      cost_event_reply: spread(runs.map((r) => r.cost_event_reply_ms)),
      all_sessions_cancelled: spread(runs.map((r) => r.all_sessions_cancelled_ms)),
      all_agents_gone: spread(runs.map((r) => r.all_agents_gone_ms)),
    },
  };
}

// One stack for every part: the first mcp process runs with the agent rate on (the defaults), as
// users get it; 100 live agents need room for 100 executions on one lifecycle instance (ADR 0064).
const b = await startBenchStack({ ...RATE_ON, MAX_EXECUTIONS: '0' });
try {
  if (PARTS.has('rate')) await measured('rate_limiter_on_mcp_stop', () => rateLimiterCost(b, ITERATIONS));
  if (PARTS.has('ingestion')) await measured('budget_check_on_ingestion', () => ingestion(b, ITERATIONS));
  if (PARTS.has('crossing')) await measured('crossing_to_agents_gone', crossings);
} finally {
  await b.stop();
}
const figures: Figure[] = Object.entries(parts).flatMap(([key, out]) => figuresOf(key, out));
const notes = [
  "Measured on a 2-core machine shared with other work (see the load averages, and each part's `measured` in details): absolute figures are inflated by it; cases are interleaved in the same run, so read the ratios.",
];
if (write) {
  const path = record.write(figures, { notes, details: { parts } });
  log(`wrote ${path}`);
  renderTables();
} else process.stdout.write(JSON.stringify({ figures, details: { parts } }, null, 2) + '\n');
