// The floor benchmark: what NATS, JetStream and PostgreSQL cost on this machine before any domain
// logic, and what the runtime helpers add on top. `npm run bench`; see bench/README.md.
import { execFileSync } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { join } from 'node:path';
import postgres from 'postgres';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats, initTracing, shutdownTracing } from '@kandev/runtime';
import { createTestDatabase, startNats } from '@kandev/testkit';
import type { BenchContext, Scenario, ScenarioResult } from './scenario.js';
import { reportRunningStacks } from './e2e.js';
import { beginResult, renderTables, type Figure } from './results.js';

const scenariosDir = fileURLToPath(new URL('./scenarios/', import.meta.url));

const intEnv = (name: string, fallback: number): number => {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got "${raw}"`);
  return n;
};

const iterations = intEnv('BENCH_ITERATIONS', 2000);
/** Every scenario runs this many times, round-robin; each result reports its best round (lowest p50). */
const rounds = intEnv('BENCH_ROUNDS', 3);
const warmup = intEnv('BENCH_WARMUP', Math.max(100, Math.round(iterations / 10)));
const only = process.env.BENCH_SCENARIOS?.split(',')
  .map((s) => s.trim())
  .filter(Boolean);
const write = process.env.BENCH_WRITE !== '0';
const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);

interface Row extends ScenarioResult {
  scenario: string;
  ratio?: { p50: number; p99: number; mean: number };
  /** p50 of this result minus p50 of its baseline, in ms. */
  deltaP50?: number;
  /** p50 of every round, in run order (the row's stats are the lowest). */
  roundsP50: number[];
}

async function loadScenarios(): Promise<Array<{ file: string; scenario: Scenario }>> {
  const files = (await readdir(scenariosDir)).filter((f) => f.endsWith('.js')).sort();
  const out: Array<{ file: string; scenario: Scenario }> = [];
  for (const file of files) {
    const mod = (await import(pathToFileURL(join(scenariosDir, file)).href)) as { default?: Scenario };
    if (!mod.default?.run) throw new Error(`bench/src/scenarios/${file} must default-export a Scenario {name, run(ctx)}`);
    if (only && !only.some((o) => file.includes(o) || mod.default!.name.includes(o))) continue;
    out.push({ file, scenario: mod.default });
  }
  return out;
}

function natsServerVersion(fallback: string | undefined): string {
  try {
    return execFileSync('nats-server', ['--version'], { encoding: 'utf8' })
      .trim()
      .replace(/^nats-server:\s*/, '');
  } catch {
    return fallback ?? 'unknown';
  }
}

const f = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(3));
const ratio = (x: number) => `${x.toFixed(2)}×`;

/**
 * Where a cancel's time goes, per hop, from the breakdown rows of 10-cancel-to-agent (same run): the
 * same cancel entered one hop further down each time, so each difference of p50s is what one hop adds
 * (differences of medians, so approximate). None when the run did not have every breakdown row.
 */
function cancelHops(rows: Row[]): Figure[] {
  const p50 = (id: string) => rows.find((r) => r.id === id)?.stats.p50;
  const entries = [
    { hop: 'gateway', label: 'gateway (/ws frame → NATS request)', to: 'cancel.scripted-acp.to_agent', back: 'cancel.scripted-acp.ws_round_trip' },
    {
      hop: 'orchestrator',
      label: 'orchestrator (+ its NATS hop): lock, then after the answer the writes, COMMIT, event publish',
      to: 'cancel.breakdown.from_orchestrator',
      back: 'cancel.breakdown.from_orchestrator.answered',
    },
    {
      hop: 'lifecycle',
      label: 'lifecycle (+ its NATS hop; node:http to agentctl where the bench uses fetch): after the answer, the two events',
      to: 'cancel.breakdown.from_lifecycle',
      back: 'cancel.breakdown.from_lifecycle.answered',
    },
    {
      hop: 'agentctl',
      label: "agentctl and the agent (+ the bench's fetch): the agent's acknowledgement",
      to: 'cancel.breakdown.from_agentctl',
      back: 'cancel.breakdown.from_agentctl.answered',
    },
  ];
  if (entries.some((e) => p50(e.to) === undefined || p50(e.back) === undefined)) return [];
  return entries.map((e, i) => {
    const next = entries[i + 1];
    return {
      id: `cancel.entered.${e.hop}`,
      label: e.label,
      to_agent_ms: p50(e.to)! - (next ? p50(next.to)! : 0),
      to_answer_ms: p50(e.back)! - (next ? p50(next.back)! : 0),
    };
  });
}

async function main() {
  // Other work on the machine skews the tails; recorded so a noisy run shows as one.
  const record = beginResult({ name: 'floor', title: 'Floor benchmark and whole-stack scenarios', command: 'npm run bench' });
  await initTracing({ serviceName: 'kandev-bench' });
  const scenarios = await loadScenarios();
  if (scenarios.length === 0) throw new Error(`no scenario matches BENCH_SCENARIOS=${process.env.BENCH_SCENARIOS}`);

  log(`starting nats-server and a fresh database (${iterations} iterations, ${warmup} warm-up)`);
  const nats = await startNats();
  const db = await createTestDatabase({ migrated: false });
  const byId = new Map<string, Array<ScenarioResult & { scenario: string }>>();
  let natsVersion: string | undefined;
  let pgInfo: { version: string; fsync: string; synchronous_commit: string } | undefined;
  try {
    for (let round = 1; round <= rounds; round++) {
      for (const { file, scenario } of scenarios) {
        const cleanups: Array<() => Promise<unknown> | unknown> = [];
        const conns: NatsConnection[] = [];
        const pools: postgres.Sql[] = [];
        const ctx: BenchContext = {
          round,
          iterations,
          warmup,
          natsUrl: nats.url,
          databaseUrl: db.url,
          async connect(name) {
            const nc = await connectNats({ url: nats.url, name });
            natsVersion ??= nc.info?.version;
            conns.push(nc);
            return nc;
          },
          sql(opts = {}) {
            const sql = postgres(db.url, { max: opts.max ?? 1, onnotice: () => undefined });
            pools.push(sql);
            return sql;
          },
          defer: (fn) => void cleanups.push(fn),
          log: (m) => log(`${scenario.name}: ${m}`),
        };
        const t = performance.now();
        log(`round ${round}/${rounds} ${file}: ${scenario.name}`);
        try {
          for (const r of await scenario.run(ctx)) byId.set(r.id, [...(byId.get(r.id) ?? []), { ...r, scenario: scenario.name }]);
        } catch (e) {
          reportRunningStacks((line) => log(`${scenario.name}: ${line}`));
          throw e;
        } finally {
          for (const fn of cleanups.reverse()) await Promise.resolve(fn()).catch((e) => log(`cleanup failed: ${(e as Error).message}`));
          for (const nc of conns) await nc.close().catch(() => undefined);
          for (const sql of pools) await sql.end({ timeout: 2 });
        }
        log(`round ${round}/${rounds} ${file}: done in ${((performance.now() - t) / 1000).toFixed(1)}s`);
      }
    }
    const sql = postgres(db.url, { max: 1, onnotice: () => undefined });
    try {
      const [v] = await sql<{ version: string; fsync: string; synchronous_commit: string }[]>`
        SELECT current_setting('server_version') AS version, current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit`;
      pgInfo = v;
    } finally {
      await sql.end({ timeout: 2 });
    }
  } finally {
    await db.drop().catch((e) => log(`could not drop ${db.name}: ${(e as Error).message}`));
    await nats.stop();
    await shutdownTracing();
  }

  // The floor: each result's least disturbed round. Background load only ever adds latency.
  const rows: Row[] = [...byId.values()].map((all) => {
    const best = all.reduce((a, b) => (b.stats.p50 < a.stats.p50 ? b : a));
    return { ...best, roundsP50: all.map((x) => x.stats.p50) };
  });
  for (const r of rows) {
    if (!r.baseline) continue;
    const b = rows.find((x) => x.id === r.baseline);
    if (!b) continue;
    r.ratio = { p50: r.stats.p50 / b.stats.p50, p99: r.stats.p99 / b.stats.p99, mean: r.stats.mean / b.stats.mean };
    r.deltaP50 = r.stats.p50 - b.stats.p50;
  }

  const figures: Figure[] = [
    ...rows.map((r) => ({
      id: r.id,
      label: r.label,
      scenario: r.scenario,
      ...r.stats,
      rounds_p50: r.roundsP50,
      ...(r.baseline && r.ratio ? { baseline: r.baseline, ratio: r.ratio, delta_p50_ms: r.deltaP50 } : {}),
    })),
    ...cancelHops(rows),
  ];
  const machine = {
    nats_server: natsServerVersion(natsVersion),
    postgres: `PostgreSQL ${pgInfo?.version ?? 'unknown'}`,
    pg_fsync: pgInfo?.fsync ?? 'unknown',
    pg_synchronous_commit: pgInfo?.synchronous_commit ?? 'unknown',
  };

  const table = rows.map(
    (r) =>
      `  ${r.id.padEnd(26)} p50 ${f(r.stats.p50).padStart(7)}  p99 ${f(r.stats.p99).padStart(7)}  mean ${f(r.stats.mean).padStart(7)}  min ${f(r.stats.min).padStart(7)}  max ${f(r.stats.max).padStart(7)} ms${r.ratio ? `   ${ratio(r.ratio.p50)} p50 of ${r.baseline}` : ''}`,
  );
  process.stdout.write(table.join('\n') + '\n');
  if (write && !only) {
    const path = record.write(figures, { machine, details: { iterations, warmup, rounds } });
    renderTables();
    log(`wrote ${path} and the tables (bench/RESULTS.md)`);
  } else {
    log('results files not written (BENCH_SCENARIOS set or BENCH_WRITE=0)');
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    log(`failed: ${(e as Error)?.stack ?? e}`);
    process.exit(1);
  },
);
