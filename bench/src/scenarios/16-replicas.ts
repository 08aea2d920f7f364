import postgres from 'postgres';
import type { Scenario, ScenarioResult } from '../scenario.js';
import { startBenchStack, summarize, type BenchStack } from '../e2e.js';
import { allGone, curvePoint, launchSessions } from '../tree/curve.js';
import { heldWakeups } from '../wakeups.js';

/*
 * Scale-out on one machine (issue "Past one machine", Measure): the same three workloads on a stack
 * with one process of every service and on one with two (`BENCH_REPLICAS`, default "1,2"; holds
 * gets a third process in the second, for the wakeup dispatch). Two cores cap what a replica can
 * add; what this shows is that a second replica costs little and that nothing serialises across
 * replicas (every figure of the second stack would be far worse than the first's if it did).
 *
 * - 50 concurrent callers each stop a task with a live scripted agent (`POST /tasks/:id/stop`):
 *   each answer's latency, and the burst's stops per second (first send to last answer).
 * - A pause of a 1,000-task tree with 100 live sessions (tree/curve.ts), the sessions spread over
 *   the lifecycle instances the stack has.
 * - Wakeup dispatch: 10,000 queued wakeups of held tasks drained by the holds replicas (claim and
 *   gate, nothing launched; scenario 22 with 1 and with 3 holds processes).
 */
const REPLICAS = (process.env.BENCH_REPLICAS ?? '1,2').split(',').map(Number);
const STOP_CALLERS = Number(process.env.BENCH_REPLICA_STOPS ?? 50);
const TREE_LIVE = Number(process.env.BENCH_REPLICA_TREE_LIVE ?? 100);
const WAKEUPS = Number(process.env.BENCH_REPLICA_WAKEUPS ?? 10_000);

async function stopBurst(b: BenchStack, workspaceId: string): Promise<{ latencies: number[]; perSec: number }> {
  const tasks: string[] = [];
  for (let i = 0; i < STOP_CALLERS; i++) tasks.push((await b.api.ok('POST', '/tasks', { workspace_id: workspaceId, title: `stop ${i}` })).id as string);
  // launchSessions skips its first id (a tree's root): give it a placeholder.
  const { live } = await launchSessions(b, ['', ...tasks], STOP_CALLERS);
  const latencies: number[] = [];
  const t0 = performance.now();
  await Promise.all(
    tasks.map(async (id) => {
      const t = performance.now();
      await b.api.ok('POST', `/tasks/${id}/stop`, { reason: 'bench' });
      latencies.push(performance.now() - t);
    }),
  );
  const wall = performance.now() - t0;
  await allGone(
    live.map((l) => l.agent),
    60_000,
  );
  return { latencies, perSec: (STOP_CALLERS / wall) * 1000 };
}

async function wakeupDrain(b: BenchStack, workspaceId: string): Promise<number> {
  const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
  try {
    const wakeups = await heldWakeups(sql, workspaceId, WAKEUPS);
    const t0 = performance.now();
    await wakeups.queue();
    for (;;) {
      const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM holds.wakeups WHERE status = 'queued'`;
      if (row!.n === 0) break;
      if (performance.now() - t0 > 300_000) throw new Error('wakeup drain did not finish in 5 min');
      await new Promise((r) => setTimeout(r, 50));
    }
    const total = performance.now() - t0;
    const [wrong] = await sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM holds.wakeups WHERE workspace_id = ${workspaceId} AND (status <> 'finished' OR skip_reason IS DISTINCT FROM 'tree_paused')`;
    if (wrong!.n !== 0) throw new Error(`${wrong!.n} wakeups not gated exactly once`);
    return (WAKEUPS / total) * 1000;
  } finally {
    await sql.end();
  }
}

const scenario: Scenario = {
  name: 'replicas',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const results: ScenarioResult[] = [];
    const one = (x: number) => summarize([x]);
    for (const replicas of REPLICAS) {
      const b = await startBenchStack({ LAUNCH_TIMEOUT_MS: '60000', GATEWAY_REQUEST_TIMEOUT_MS: '90000', WAKEUP_BATCH: '200' }, { replicas });
      try {
        const holds = replicas > 1 ? 3 : 1;
        for (let i = replicas; i < holds; i++) await b.stack.addReplica('holds');
        const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;
        const stops = await stopBurst(b, ws);
        const tree = await curvePoint(b, ws, TREE_LIVE, ctx.log);
        const wakeups = await wakeupDrain(b, ws);
        const s = summarize(stops.latencies);
        ctx.log(
          `${replicas} replica(s): ${STOP_CALLERS} stops at once p50 ${s.p50.toFixed(0)} / p99 ${s.p99.toFixed(0)} ms, ${stops.perSec.toFixed(1)} stops/s; ` +
            `tree pause ${TREE_LIVE} live: reply ${tree.replyMs.toFixed(0)} ms, agents gone ${tree.agentsGoneMs.toFixed(0)} ms, reads p99 ${tree.reads.p99.toFixed(0)} ms; ` +
            `wakeups ${wakeups.toFixed(0)}/s with ${holds} holds process(es)`,
        );
        const base = replicas === REPLICAS[0] ? undefined : `replicas.${REPLICAS[0]}`;
        results.push(
          {
            id: `replicas.${replicas}.stop.${STOP_CALLERS}`,
            label: `${replicas} process(es) of each service: ${STOP_CALLERS} concurrent POST /tasks/:id/stop of live agents, each answer`,
            stats: s,
            ...(base ? { baseline: `${base}.stop.${STOP_CALLERS}` } : {}),
          },
          { id: `replicas.${replicas}.stop.${STOP_CALLERS}.per_sec`, label: `same: stops per second over the burst (not ms)`, stats: one(stops.perSec) },
          {
            id: `replicas.${replicas}.tree.${TREE_LIVE}.reply`,
            label: `same stack: POST tree/pause, 1,000 tasks, ${TREE_LIVE} live sessions: reply`,
            stats: one(tree.replyMs),
            ...(base ? { baseline: `${base}.tree.${TREE_LIVE}.reply` } : {}),
          },
          {
            id: `replicas.${replicas}.tree.${TREE_LIVE}.agents_gone`,
            label: `same: until every agent process is gone`,
            stats: one(tree.agentsGoneMs),
            ...(base ? { baseline: `${base}.tree.${TREE_LIVE}.agents_gone` } : {}),
          },
          { id: `replicas.${replicas}.tree.${TREE_LIVE}.reads`, label: `same: GET /sessions/:id during the teardown`, stats: tree.reads },
          {
            id: `replicas.${replicas}.wakeups.per_sec`,
            label: `same stack, ${replicas > 1 ? 3 : 1} holds process(es): ${WAKEUPS} queued wakeups of held tasks gated, wakeups per second (not ms)`,
            stats: one(wakeups),
          },
        );
      } finally {
        await b.stop();
      }
    }
    return results;
  },
};
export default scenario;
