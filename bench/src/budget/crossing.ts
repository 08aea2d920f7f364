import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { eventually, processAlive } from '@kandev/testkit';
import type { BenchStack } from '../e2e.js';
import { family } from '../families.js';

/**
 * A root with `live` children each running a scripted agent (a long turn); the cost event that
 * reaches the root's cap; until every session is CANCELLED (polled in the database) and every
 * agent process is gone (signal 0 on its pid, polled every 5 ms).
 */
export async function crossingToAgentsGone(b: BenchStack, live: number) {
  const { parent, mcp, children, pids } = await family(b, live);
  await mcp.close();
  const root = parent.id as string;
  // The live ones: a start that a busy lifecycle refused (and family() retried) left a FAILED session behind.
  const sessions = (await Promise.all(children.map(async (c) => (await b.api.ok('GET', `/tasks/${c}`)).sessions as Array<{ id: string; state: string }>)))
    .flat()
    .filter((s) => s.state === 'RUNNING')
    .map((s) => s.id);
  if (sessions.length !== live) throw new Error(`expected ${live} running sessions, found ${sessions.length}`);
  await b.api.ok('PUT', `/tasks/${root}/tree/budget`, { limit_cents: 100 });
  const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
  try {
    const agentPids = [...pids.values()];
    const t0 = performance.now();
    await b.api.ok('POST', '/cost-events', {
      task_id: children[0],
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
        if (c!.n === sessions.length) cancelledMs = performance.now() - t0;
      }
      if (agentPids.every((p) => !processAlive(p))) goneMs = performance.now() - t0;
      else if (performance.now() - t0 > 180_000) throw new Error('agents still alive after 180 s');
      else await new Promise((r) => setTimeout(r, 5));
    }
    // The budget records its hold once the pause has answered (up to its 1 s propagation wait).
    await eventually(async () => (await b.api.ok('GET', `/tasks/${root}/tree/budget`)).hold_id, 30_000);
    return { live, cost_event_reply_ms: replyMs, all_sessions_cancelled_ms: cancelledMs ?? goneMs, all_agents_gone_ms: goneMs };
  } finally {
    await sql.end();
  }
}
