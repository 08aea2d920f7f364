import postgres from 'postgres';
import type { Scenario, ScenarioResult } from '../scenario.js';
import { agentProcess, agentsEnded, e2eIterations, preciseNow, startBenchStack, summarize, type AgentProcess, type BenchStack } from '../e2e.js';
import { settled } from '../cpu.js';
import { seedTree } from '../tree/seed.js';

/**
 * R-4 latency through the gateway: tree pause / cancel / resume / restore on trees of growing size
 * with no live session, then a 1,000-task tree with 10, 50 and 100 live scripted sessions: time to
 * the reply, until every agent process has received SIGTERM, and until every one is gone. The
 * floor is the bare PostgreSQL commit of the same run (`pg.commit.transaction`): a hold is one
 * transaction.
 */
const sizes = (process.env.BENCH_TREE_SIZES ?? '10,100,1000,5000').split(',').map(Number);
const liveCounts = (process.env.BENCH_TREE_LIVE ?? '10,50,100').split(',').map(Number);

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

/** Start `count` long-running sessions on distinct tasks, a few at a time (2 cores), and wait until each agent runs. */
async function liveSessions(b: BenchStack, taskIds: string[], count: number): Promise<Array<{ session: string; agent: AgentProcess }>> {
  const out: Array<{ session: string; agent: AgentProcess }> = [];
  const queue = taskIds.slice(1, count + 1);
  const prompt = JSON.stringify({ script: [{ sleep_ms: 600_000 }] });
  const worker = async () => {
    for (let t = queue.shift(); t; t = queue.shift()) {
      const s = await b.api.ok('POST', `/tasks/${t}/sessions`, { prompt });
      const detail = (await b.api.get(`/sessions/${s.id}`)).body;
      const agent = agentProcess(detail.execution.pid);
      if (!agent) throw new Error(`the agent of session ${s.id} (pid ${detail.execution.pid}) is not running`);
      out.push({ session: s.id, agent });
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  return out;
}

const scenario: Scenario = {
  name: 'tree holds',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const reps = e2eIterations(9);
    const b = await startBenchStack({ LAUNCH_TIMEOUT_MS: '60000', GATEWAY_REQUEST_TIMEOUT_MS: '90000' });
    ctx.defer(() => b.stop());
    const results: ScenarioResult[] = [];
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;

    for (const n of sizes) {
      const { root } = await seedTree(b, ws, n);
      const pause: number[] = [];
      const resume: number[] = [];
      const cancel: number[] = [];
      const restore: number[] = [];
      for (let i = 0; i < reps; i++) {
        pause.push(await timed(() => b.api.ok('POST', `/tasks/${root}/tree/pause`)));
        resume.push(await timed(() => b.api.ok('POST', `/tasks/${root}/tree/resume`)));
        cancel.push(await timed(() => b.api.ok('POST', `/tasks/${root}/tree/cancel`)));
        restore.push(await timed(() => b.api.ok('POST', `/tasks/${root}/tree/restore`)));
      }
      const base = 'pg.commit.transaction';
      results.push(
        { id: `tree.pause.idle.${n}`, label: `POST /tasks/:id/tree/pause, ${n} tasks, no live session`, stats: summarize(pause), baseline: base },
        { id: `tree.resume.idle.${n}`, label: `POST /tasks/:id/tree/resume, ${n} tasks`, stats: summarize(resume), baseline: base },
        {
          id: `tree.cancel.idle.${n}`,
          label: `POST /tasks/:id/tree/cancel, ${n} tasks (every status written, one event each)`,
          stats: summarize(cancel),
          baseline: base,
        },
        { id: `tree.restore.idle.${n}`, label: `POST /tasks/:id/tree/restore, ${n} tasks`, stats: summarize(restore), baseline: base },
      );
      ctx.log(`${n} tasks: pause p50 ${summarize(pause).p50.toFixed(1)} ms, cancel p50 ${summarize(cancel).p50.toFixed(1)} ms`);
    }

    const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
    ctx.defer(() => sql.end());
    for (const live of liveCounts) {
      for (const mode of live === Math.max(...liveCounts) ? (['pause', 'cancel'] as const) : (['pause'] as const)) {
        const { root, ids } = await seedTree(b, ws, 1000);
        const sessions = await liveSessions(b, ids, live);
        // As a stop burst does (12-stop): agents that report ready keep starting for seconds on this
        // machine, and a hold begun inside that tail measured the machine, not the hold (its reply
        // read 0.7 s in one run and 3.8 s in the next).
        const settledMs = await settled(['agent', 'agentctl'], { timeoutMs: 30_000 });
        const t0 = preciseNow();
        const reply = await timed(() => b.api.ok('POST', `/tasks/${root}/tree/${mode}`));
        const [c] = await sql<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM orchestrator.sessions WHERE id = ANY(${sessions.map((s) => s.session)}) AND state = 'CANCELLED'`;
        if (c!.n !== live) throw new Error(`${mode}: only ${c!.n} of ${live} sessions CANCELLED at the reply`);
        const ends = await agentsEnded(
          b,
          sessions.map((s) => s.agent),
          t0,
          120_000,
        );
        const allSigterm = Math.max(...ends.map((e) => e.sigterm ?? e.gone)) - t0;
        const allGone = Math.max(...ends.map((e) => e.gone)) - t0;
        const killedUnheard = ends.filter((e) => e.sigterm === null).length;
        results.push(
          {
            id: `tree.${mode}.live.${live}.reply`,
            label: `POST tree/${mode}, 1,000 tasks, ${live} live sessions: reply (all ${live} CANCELLED by then)`,
            stats: summarize([reply]),
            baseline: 'pg.commit.transaction',
          },
          {
            id: `tree.${mode}.live.${live}.sigterm`,
            label: `same: until every one of the ${live} agent processes received SIGTERM (logged it, or was gone: ${killedUnheard} killed after the grace before their handler ran)`,
            stats: summarize([allSigterm]),
          },
          { id: `tree.${mode}.live.${live}.gone`, label: `same: until every one of the ${live} agent processes was gone`, stats: summarize([allGone]) },
        );
        ctx.log(
          `${mode} with ${live} live (${settledMs === null ? 'agents never settled' : `agents settled ${Math.round(settledMs)} ms after launch`}): reply ${reply.toFixed(0)} ms, all SIGTERM ${allSigterm.toFixed(0)} ms, all gone ${allGone.toFixed(0)} ms (${killedUnheard} killed before their SIGTERM handler ran)`,
        );
        await b.api.ok('POST', `/tasks/${root}/tree/${mode === 'pause' ? 'resume' : 'restore'}`);
      }
    }
    return results;
  },
};
export default scenario;
