import type { Scenario, ScenarioResult } from '../scenario.js';
import { startBenchStack, summarize, type BenchStack } from '../e2e.js';

const STARTS = 100;
/** The lifecycle gate of the fault world (e2e/test/fault-world.ts): 2 launches at once, 3 s of queue. */
const GATE = { LAUNCH_CONCURRENCY: '2', LAUNCH_QUEUE_WAIT_MS: '3000' };

/**
 * 100 session starts at once (each on its own task, each with a long-running prompt) against one
 * lifecycle instance whose gate admits 2 launches at a time and 3 s of queue: each start either
 * starts (201) or is refused (503 UNAVAILABLE with Retry-After). Reports how many of each, and the
 * latency of a refusal from the client's send (the bound: within 200 ms) and of a start.
 *
 * The floor, in the same run: 100 concurrent `GET /tasks/:id` through the same chain (HTTP, token,
 * gateway, NATS, orchestrator, one PostgreSQL read), after one such burst to warm it. A refusal
 * crosses that chain and one more NATS hop (the lifecycle's admission), so at this concurrency it
 * cannot answer faster than the floor: what is ours is the ratio. The burst runs twice: on services
 * that never started a session (`.cold`, the first burst after a deploy) and again once the first
 * burst's agents were stopped (warm, as a system that has run for a while meets a burst).
 */
const scenario: Scenario = {
  name: '100 concurrent session starts: started, refused, refusal latency',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const b = await startBenchStack({ ...GATE, TEARDOWN_GRACE_MS: '500' });
    try {
      const workspace = (await b.api.ok('POST', '/workspaces', { name: 'burst' })).id as string;
      const tasks: string[] = [];
      for (let i = 0; i < 2 * STARTS; i++) tasks.push((await b.api.ok('POST', '/tasks', { workspace_id: workspace, title: `burst ${i}` })).id as string);
      const first = tasks.slice(0, STARTS);
      await Promise.all(first.map((id) => timedFetch(b, 'GET', `/tasks/${id}`)));
      const floor = summarize((await Promise.all(first.map((id) => timedFetch(b, 'GET', `/tasks/${id}`)))).map((r) => r.ms));
      ctx.log(`floor, ${STARTS} concurrent GET /tasks/:id: p50 ${floor.p50.toFixed(1)} ms, p99 ${floor.p99.toFixed(1)} ms`);
      const results: ScenarioResult[] = [
        {
          id: 'burst.floor.get_task',
          label: `floor: ${STARTS} concurrent GET /tasks/:id through the same gateway (warm), just before the bursts`,
          stats: floor,
        },
      ];
      results.push(...(await burst(ctx, b, first, '.cold')));
      results.push(...(await burst(ctx, b, tasks.slice(STARTS), '')));
      return results;
    } finally {
      await b.stop();
    }
  },
};

async function burst(ctx: Parameters<Scenario['run']>[0], b: BenchStack, tasks: string[], suffix: string): Promise<ScenarioResult[]> {
  const prompt = JSON.stringify({ script: [{ sleep_ms: 120_000 }] });
  const answers = await Promise.all(tasks.map((id) => timedFetch(b, 'POST', `/tasks/${id}/sessions`, { prompt })));
  const started = answers.filter((a) => a.status === 201);
  const refused = answers.filter((a) => a.status === 503);
  const other = answers.filter((a) => a.status !== 201 && a.status !== 503);
  ctx.log(
    `burst${suffix}: ${started.length} started, ${refused.length} refused (${refused.filter((r) => r.retryAfter).length} with Retry-After), ${other.length} other ${JSON.stringify(other.map((o) => o.status))}`,
  );
  const results: ScenarioResult[] = [];
  if (refused.length) {
    const stats = summarize(refused.map((r) => r.ms));
    ctx.log(`burst${suffix} refusal: p50 ${stats.p50.toFixed(1)} ms, p99 ${stats.p99.toFixed(1)} ms, max ${stats.max.toFixed(1)} ms`);
    results.push({
      id: `burst.start.refused${suffix}`,
      label: `POST /tasks/:id/sessions refused (503 + Retry-After) in a burst of ${STARTS} starts${suffix ? ' on services that never launched' : ''}, LAUNCH_CONCURRENCY=2, LAUNCH_QUEUE_WAIT_MS=3000; n = refused count (${started.length} started)`,
      stats,
    });
  }
  if (started.length) {
    const stats = summarize(started.map((r) => r.ms));
    ctx.log(`burst${suffix} start: p50 ${stats.p50.toFixed(1)} ms, p99 ${stats.p99.toFixed(1)} ms`);
    results.push({ id: `burst.start.started${suffix}`, label: `POST /tasks/:id/sessions started (201) in the same burst; n = started count`, stats });
  }
  // What started is stopped before the next burst (the stop answers once its teardown was accepted).
  await Promise.all(started.map((a) => b.api.post(`/tasks/${a.id}/stop`)));
  return results;
}

async function timedFetch(b: BenchStack, method: 'GET' | 'POST', path: string, body?: unknown) {
  const t0 = performance.now();
  const res = await fetch(`${b.stack.gatewayUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${b.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  await res.arrayBuffer();
  return { id: path.split('/')[2]!, status: res.status, retryAfter: res.headers.get('retry-after'), ms: performance.now() - t0 };
}

export default scenario;
