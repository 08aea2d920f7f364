import postgres from 'postgres';
import { connectMcp, eventually, processAlive } from '@kandev/testkit';
import { startSdkNoopServer } from '../mcp-floor.js';
import type { Scenario, ScenarioResult } from '../scenario.js';
import { e2eIterations, natsAndHttpFloor, samples, startBenchStack, summarize, summedFloor, type BenchStack } from '../e2e.js';

type Mcp = Awaited<ReturnType<typeof connectMcp>>;

/** A coordinator task with its MCP client, and `n` children each running a long turn. */
async function family(b: BenchStack, n: number) {
  const workspace_id = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id;
  const parent = await b.api.ok('POST', '/tasks', { workspace_id, title: 'coordinator' });
  const mcp = await connectMcp(b.stack.mcpUrl, await b.stack.agentToken(parent.id));
  const children: string[] = [];
  const pids = new Map<string, number>();
  // Launch a few at a time: every child is two node processes (agentctl + agent).
  for (let i = 0; i < n; i += 8) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(8, n - i) }, async () => {
        const child = await b.api.ok('POST', '/tasks', { workspace_id, title: 'child', parent_id: parent.id });
        const s = await b.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: JSON.stringify({ script: [{ sleep_ms: 600_000 }] }) });
        const exec = await eventually(async () => {
          const e = (await b.api.get(`/sessions/${s.id}`)).body.execution;
          return e?.status === 'RUNNING' ? e : null;
        }, 30_000);
        pids.set(child.id, exec.pid);
        return child.id as string;
      }),
    );
    children.push(...batch);
  }
  return { parent, mcp, children, pids };
}

async function stop(mcp: Mcp, taskId: string): Promise<number> {
  const t = performance.now();
  const res = await mcp.callJson('stop_task_kandev', { task_id: taskId });
  const ms = performance.now() - t;
  if (res.isError || res.json?.status !== 'stopped') throw new Error(`stop failed: ${res.text}`);
  return ms;
}

/**
 * R-1 latency: `stop_task_kandev` through a real MCP client (Streamable HTTP) to a real orchestrator,
 * lifecycle and agent, each call stopping a child with a turn in flight. At 1 caller and at 50
 * concurrent callers. Floor, measured in the same run: the MCP SDK's own stateless server answering a
 * no-op tool + a bare NATS round trip + a bare PostgreSQL commit.
 */
const scenario: Scenario = {
  name: 'stop_task_kandev end to end',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const iterations = e2eIterations(40);
    const concurrency = Number(process.env.BENCH_STOP_CONCURRENCY ?? 50);
    const b = await startBenchStack({ TEARDOWN_GRACE_MS: '500' });
    ctx.defer(() => b.stop());

    const floor = await natsAndHttpFloor(b, 500);
    const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
    await sql`CREATE TABLE IF NOT EXISTS public.bench_commit (id bigserial primary key, v int)`;
    const pg = await samples(() => sql.begin((tx) => tx`INSERT INTO public.bench_commit (v) VALUES (1)`), 500);
    await sql.end();
    // The MCP floor (issue 12): the SDK's own stateless server answering a no-op tool, not our service.
    const sdk = await startSdkNoopServer();
    const noop = await connectMcp(sdk.url, 'unused');
    const mcpNoop = await samples(() => noop.callTool({ name: 'noop', arguments: {} }), 500);
    await noop.close();
    await sdk.stop();

    // Not-running stops are cheap to repeat: the decision path without a live child.
    const idle = await family(b, 0);
    const idleChild = (await b.api.ok('POST', '/tasks', { workspace_id: idle.parent.workspace_id, title: 'idle', parent_id: idle.parent.id })).id;
    const notRunning = await samples(() => idle.mcp.callJson('stop_task_kandev', { task_id: idleChild }), 300);

    ctx.log(`launching ${iterations} children for the 1-caller run`);
    const one = await family(b, iterations);
    const single: number[] = [];
    for (const child of one.children) {
      single.push(await stop(one.mcp, child));
      // One stop at a time on a quiet machine: the previous child's teardown (SIGTERM, two node
      // processes exiting, its events) would otherwise share the 2 cores with the next stop.
      // Waits for the agent process itself to be gone (a /proc check, nothing asked of the system
      // being measured).
      await eventually(async () => !processAlive(one.pids.get(child)!), 30_000);
      await new Promise((r) => setTimeout(r, 100));
    }

    ctx.log(`launching ${concurrency} children for the ${concurrency}-caller run`);
    const many: number[] = [];
    for (let round = 0; round < 2; round++) {
      // Launch a few at a time (each child is two node processes starting on 2 cores), then stop all at once.
      const callers: Array<Awaited<ReturnType<typeof family>>> = [];
      for (let i = 0; i < concurrency; i += 8) callers.push(...(await Promise.all(Array.from({ length: Math.min(8, concurrency - i) }, () => family(b, 1)))));
      await new Promise((r) => setTimeout(r, 1_000)); // let the fresh agents finish starting
      many.push(...(await Promise.all(callers.map((c) => stop(c.mcp, c.children[0]!)))));
      for (const c of callers) await c.mcp.close();
    }

    const results: ScenarioResult[] = [
      { id: 'floor.mcp.noop', label: "MCP SDK's stateless Streamable HTTP server (own process) answering a no-op tools/call, same run", stats: summarize(mcpNoop) },
      { id: 'floor.pg.commit.stop_run', label: 'bare PostgreSQL commit (BEGIN/INSERT/COMMIT), same run', stats: summarize(pg) },
      { id: 'floor.mcp+nats+pg', label: 'sum of floors: MCP no-op + NATS round trip + PostgreSQL commit (pairwise)', stats: summedFloor(mcpNoop, floor.natsSamples, pg) },
      { id: 'stop_task.not_running', label: 'stop_task_kandev on a child with nothing running (checks + registry lookup)', stats: summarize(notRunning), baseline: 'floor.mcp+nats+pg' },
      { id: 'stop_task.stopped.1', label: 'stop_task_kandev stopping a child with a turn in flight, 1 caller', stats: summarize(single), baseline: 'floor.mcp+nats+pg' },
      { id: `stop_task.stopped.${concurrency}`, label: `stop_task_kandev, ${concurrency} concurrent callers each stopping its own child`, stats: summarize(many), baseline: 'floor.mcp+nats+pg' },
    ];
    await idle.mcp.close();
    await one.mcp.close();
    return results;
  },
};
export default scenario;
