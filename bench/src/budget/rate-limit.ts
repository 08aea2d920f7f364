import postgres from 'postgres';
import { connectNats } from '@kandev/runtime';
import { connectMcp, natsLogin } from '@kandev/testkit';
import { startSdkNoopServer } from '../mcp-floor.js';
import type { Mcp } from '../families.js';
import type { BenchStack } from '../e2e.js';
import { interleaved, log, ratio } from './common.js';

/** The agent rate a real deployment runs with (services/mcp/src/env.ts): the limiter on. */
export const RATE_ON = { KANDEV_AGENT_RATE: '20', KANDEV_AGENT_BURST: '40', MCP_REPLICAS: '1' };

/**
 * What the per-token rate limiter (ADR 0065) costs the MCP stop. The stack's first mcp process runs
 * with the limiter on (RATE_ON); a replica beside it with it off (`KANDEV_AGENT_RATE=0`); both in
 * front of the same orchestrator. Each iteration calls `stop_task_kandev` through each (a child
 * with nothing live: the `not_running` answer, the stop's whole path with no teardown after it, so
 * the limiter's share is largest), and the raw floor: the MCP SDK's no-op tool on its own server,
 * a bare NATS round trip and a PostgreSQL commit. Parents take turns, so no token nears its rate.
 */
export async function rateLimiterCost(b: BenchStack, iterations: number) {
  const off = await b.stack.addReplica('mcp', { KANDEV_AGENT_RATE: '0' });
  const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench rate' })).id as string;
  const PARENTS = 20;
  const pairs: Array<{ child: string; on: Mcp; off: Mcp }> = [];
  for (let i = 0; i < PARENTS; i++) {
    const parent = (await b.api.ok('POST', '/tasks', { workspace_id: ws, title: `parent ${i}` })).id as string;
    const child = (await b.api.ok('POST', '/tasks', { workspace_id: ws, title: `child ${i}`, parent_id: parent })).id as string;
    const token = await b.stack.agentToken(parent);
    pairs.push({ child, on: await connectMcp(b.stack.mcpUrl, token), off: await connectMcp(off.urls.mcp!, token) });
  }
  const noop = await startSdkNoopServer();
  const floorClient = await connectMcp(noop.url, 'unused');
  const responder = await connectNats({ url: b.stack.nats.url, name: 'bench-rate-floor-responder', ...natsLogin(b.stack.nats) });
  const body = new TextEncoder().encode('{"ok":true}');
  responder.subscribe('bench.rate.floor', { callback: (_e, m) => void m.respond(body) });
  await responder.flush();
  const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
  await sql`CREATE TABLE IF NOT EXISTS public.bench_rate_commit (id bigserial primary key, v int)`;
  let turn = 0;
  const stop = (via: 'on' | 'off') => async () => {
    const p = pairs[Math.floor(turn++ / 2) % PARENTS]!;
    const res = await p[via].callJson('stop_task_kandev', { task_id: p.child });
    if (res.isError || res.json?.status !== 'not_running') throw new Error(`stop via limiter ${via}: ${res.text}`);
  };
  try {
    log(`rate limiter: ${iterations} interleaved stops per case`);
    const stats = await interleaved(
      {
        'mcp_stop.limiter_on': stop('on'),
        'mcp_stop.limiter_off': stop('off'),
        'floor.mcp+nats+pg': async () => {
          await floorClient.callTool({ name: 'noop', arguments: {} });
          await b.nc.request('bench.rate.floor', body, { timeout: 10_000 });
          await sql.begin((tx) => tx`INSERT INTO public.bench_rate_commit (v) VALUES (1)`);
        },
      },
      iterations,
      Math.max(50, iterations / 10),
    );
    // Evidence the limiter was on where it was said to be: one token's burst of 60 calls.
    const burst = async (via: 'on' | 'off') => {
      const p = pairs[0]!;
      const answers = await Promise.allSettled(Array.from({ length: 60 }, () => p[via].callJson('stop_task_kandev', { task_id: p.child })));
      return answers.filter((a) => a.status === 'rejected' && /RATE_LIMITED|429/.test(String(a.reason))).length;
    };
    const refused = { on: await burst('on'), off: await burst('off') };
    return {
      what: 'stop_task_kandev (not_running) through an mcp process with the per-token limiter on (KANDEV_AGENT_RATE=20, burst 40) and one with it off (0), same orchestrator, interleaved call by call with the raw floor',
      floor: 'MCP SDK no-op tool on its own server + bare NATS request/reply + PostgreSQL INSERT/COMMIT, sequential, one sample each iteration',
      stats,
      limiter_cost_ms: {
        p50: stats['mcp_stop.limiter_on']!.p50 - stats['mcp_stop.limiter_off']!.p50,
        p99: stats['mcp_stop.limiter_on']!.p99 - stats['mcp_stop.limiter_off']!.p99,
      },
      ratios: {
        on_vs_off: ratio(stats['mcp_stop.limiter_on']!, stats['mcp_stop.limiter_off']!),
        on_vs_floor: ratio(stats['mcp_stop.limiter_on']!, stats['floor.mcp+nats+pg']!),
        off_vs_floor: ratio(stats['mcp_stop.limiter_off']!, stats['floor.mcp+nats+pg']!),
      },
      check_burst_of_60_from_one_token_refused: refused,
    };
  } finally {
    for (const p of pairs) await Promise.allSettled([p.on.close(), p.off.close()]);
    await floorClient.close();
    await noop.stop();
    await responder.close();
    await sql.end(); // the replica stops with the stack
  }
}
