import type { Scenario, ScenarioResult } from '../scenario.js';
import { startBenchStack, summarize } from '../e2e.js';

const STARTS = 100;
/** The lifecycle gate of the fault world (e2e/test/fault-world.ts): 2 launches at once, 3 s of queue. */
const GATE = { LAUNCH_CONCURRENCY: '2', LAUNCH_QUEUE_WAIT_MS: '3000' };

/**
 * 100 session starts at once (each on its own task, each with a long-running prompt) against one
 * lifecycle instance whose gate admits 2 launches at a time and 3 s of queue: each start either
 * starts (201) or is refused (503 UNAVAILABLE with Retry-After). Reports how many of each, and the
 * latency of a refusal from the client's send (the bound: within 200 ms) and of a start.
 */
const scenario: Scenario = {
  name: '100 concurrent session starts: started, refused, refusal latency',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const b = await startBenchStack({ ...GATE, TEARDOWN_GRACE_MS: '500' });
    try {
      const workspace = (await b.api.ok('POST', '/workspaces', { name: 'burst' })).id as string;
      const tasks: string[] = [];
      for (let i = 0; i < STARTS; i++) tasks.push((await b.api.ok('POST', '/tasks', { workspace_id: workspace, title: `burst ${i}` })).id as string);
      const prompt = JSON.stringify({ script: [{ sleep_ms: 120_000 }] });
      const answers = await Promise.all(
        tasks.map(async (id) => {
          const t0 = performance.now();
          const res = await fetch(`${b.stack.gatewayUrl}/tasks/${id}/sessions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${b.token}`, 'content-type': 'application/json' },
            body: JSON.stringify({ prompt }),
          });
          await res.arrayBuffer();
          return { id, status: res.status, retryAfter: res.headers.get('retry-after'), ms: performance.now() - t0 };
        }),
      );
      const started = answers.filter((a) => a.status === 201);
      const refused = answers.filter((a) => a.status === 503);
      const other = answers.filter((a) => a.status !== 201 && a.status !== 503);
      ctx.log(
        `${started.length} started, ${refused.length} refused (${refused.filter((r) => r.retryAfter).length} with Retry-After), ${other.length} other ${JSON.stringify(other.map((o) => o.status))}`,
      );
      const results: ScenarioResult[] = [];
      if (refused.length) {
        const stats = summarize(refused.map((r) => r.ms));
        ctx.log(`refusal: p50 ${stats.p50.toFixed(1)} ms, p99 ${stats.p99.toFixed(1)} ms, max ${stats.max.toFixed(1)} ms`);
        results.push({
          id: 'burst.start.refused',
          label: `POST /tasks/:id/sessions refused (503 + Retry-After) in a burst of ${STARTS} starts, LAUNCH_CONCURRENCY=2, LAUNCH_QUEUE_WAIT_MS=3000; n = refused count (${started.length} started)`,
          stats,
        });
      }
      if (started.length) {
        const stats = summarize(started.map((r) => r.ms));
        ctx.log(`start: p50 ${stats.p50.toFixed(1)} ms, p99 ${stats.p99.toFixed(1)} ms`);
        results.push({ id: 'burst.start.started', label: `POST /tasks/:id/sessions started (201) in the same burst; n = started count`, stats });
      }
      // What started is stopped before the stack goes.
      await Promise.all(started.map((a) => b.api.post(`/tasks/${a.id}/stop`)));
      return results;
    } finally {
      await b.stop();
    }
  },
};
export default scenario;
