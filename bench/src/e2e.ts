import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectNats, type NatsConnection } from '@kandev/runtime';
import { ApiClient, eventually, startStack, type Stack } from '@kandev/testkit';
import { readAgentEvents, type AgentEvent } from '@kandev/testkit/agents/events';
import { measure, summarize, type Stats } from './stats.js';

/** Iterations of whole-stack scenarios (each may launch real agent processes). */
export const e2eIterations = (fallback: number) => {
  const raw = process.env.BENCH_E2E_ITERATIONS;
  return raw ? Math.max(1, Number(raw)) : fallback;
};

export interface BenchStack {
  stack: Stack;
  api: ApiClient;
  token: string;
  eventsFile: string;
  nc: NatsConnection;
  agentEvents(pid: number): AgentEvent[];
  stop(): Promise<void>;
}

/** The whole system as processes (as `npm start` runs it), with the scripted agents' observation log. */
export async function startBenchStack(env: NodeJS.ProcessEnv = {}): Promise<BenchStack> {
  const eventsFile = join(mkdtempSync(join(tmpdir(), 'kandev-bench-events-')), 'events.jsonl');
  const stack = await startStack({ env: { SCRIPTED_AGENT_EVENTS: eventsFile, LOG_LEVEL: 'warn', ...env } });
  const token = await stack.operatorToken();
  const nc = await connectNats({ url: stack.nats.url, name: 'bench-client' });
  return {
    stack,
    api: new ApiClient(stack.gatewayUrl, token),
    token,
    eventsFile,
    nc,
    agentEvents: (pid) => readAgentEvents(eventsFile).filter((e) => e.pid === pid),
    async stop() {
      await nc.close();
      await stack.stop();
    },
  };
}

/** Epoch milliseconds with sub-millisecond precision, comparable with the scripted agents' `t`. */
export const preciseNow = () => performance.timeOrigin + performance.now();

/** A session of a fresh task whose agent is up and idle; returns its ids and pid. */
export async function idleSession(b: BenchStack, opts: { agent?: string; workspace_id?: string; parent_id?: string } = {}) {
  const workspace_id = opts.workspace_id ?? (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id;
  const task = await b.api.ok('POST', '/tasks', { workspace_id, title: 'bench', ...(opts.agent ? { agent: opts.agent } : {}), ...(opts.parent_id ? { parent_id: opts.parent_id } : {}) });
  const session = await b.api.ok('POST', `/tasks/${task.id}/sessions`, {});
  const detail = await eventually(async () => (await b.api.get(`/sessions/${session.id}`)).body.execution ? (await b.api.get(`/sessions/${session.id}`)).body : null);
  return { workspace_id, task, session, pid: detail.execution.pid as number, execution_id: detail.execution.execution_id as string };
}

/** Wait (polling the log, 0.2 ms apart) until the agent with `pid` has logged an event matching `pred` after `since`. */
export async function agentEventAfter(b: BenchStack, pid: number, since: number, pred: (e: AgentEvent) => boolean, timeoutMs = 10_000): Promise<AgentEvent> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const hit = b.agentEvents(pid).find((e) => e.t >= since && pred(e));
    if (hit) return hit;
    if (Date.now() > end) throw new Error('agent event not seen in time');
    await new Promise((r) => setTimeout(r, 0.2));
  }
}

/** Bare floors measured in the same run: a core NATS round trip and a loopback HTTP round trip. */
export async function natsAndHttpFloor(b: BenchStack, iterations: number): Promise<{ nats: Stats; http: Stats; natsSamples: number[]; httpSamples: number[] }> {
  const server = await connectNats({ url: b.stack.nats.url, name: 'bench-floor-responder' });
  const body = new TextEncoder().encode('{"ok":true}');
  const sub = server.subscribe('bench.floor.ping', { callback: (_e, m) => void m.respond(body) });
  await server.flush();
  const http = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/`;
  try {
    const natsSamples = await samples(() => b.nc.request('bench.floor.ping', body, { timeout: 5000 }), iterations);
    const httpSamples = await samples(async () => (await fetch(url, { method: 'POST', body: '{}' })).text(), iterations);
    return { nats: summarize(natsSamples), http: summarize(httpSamples), natsSamples, httpSamples };
  } finally {
    sub.unsubscribe();
    await server.close();
    await new Promise((r) => http.close(r));
  }
}

/** Raw samples of `op` after a short warm-up. */
export async function samples(op: () => Promise<unknown>, iterations: number, warmup = Math.min(50, iterations)): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await op();
  const out: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t = performance.now();
    await op();
    out.push(performance.now() - t);
  }
  return out;
}

/** Stats of the pairwise sums of independent floor samples: the "sum of floors" baseline. */
export const summedFloor = (...sets: number[][]) => summarize(sets[0]!.map((_, i) => sets.reduce((s, xs) => s + xs[i % xs.length]!, 0)));

export { measure, summarize };
