import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { closeSync, openSync, readSync, writeFileSync } from 'node:fs';
import { bindBusIdentity, busIdentityFromEnv, connectNats, type NatsConnection } from '@kandev/runtime';
import { eventually, natsLogin, procAlive, procStat, STACK_SERVICES, startAgentStack, type AgentStack, type StackOptions } from '@kandev/testkit';
import { monotonicNow, type AgentEvent } from '@kandev/testkit/agents/events';
import { measure, summarize, type Stats } from './stats.js';

/** Iterations of whole-stack scenarios (each may launch real agent processes). */
export const e2eIterations = (fallback: number) => {
  const raw = process.env.BENCH_E2E_ITERATIONS;
  return raw ? Math.max(1, Number(raw)) : fallback;
};

export interface BenchStack extends AgentStack {
  /** Signs as the gateway: operator requests to the orchestrator and holds (ADR 0055). */
  nc: NatsConnection;
  /** Signs as the orchestrator: requests to lifecycle's execution endpoints, which admit only it and lifecycle. */
  asOrchestrator: NatsConnection;
}

/** Stacks started and not yet stopped: what their services logged last is printed when a scenario fails. */
const running = new Set<BenchStack>();

/** The whole system as processes (as `npm start` runs it), with the agents' log and a NATS client. */
export async function startBenchStack(env: NodeJS.ProcessEnv = {}, opts: Omit<StackOptions, 'env'> = {}): Promise<BenchStack> {
  // Rates off unless a scenario sets them (the budget bench measures the limiter): a scenario's burst
  // from one token measures a path, not the limit (ADR 0065).
  const world = await startAgentStack({ LOG_LEVEL: 'warn', KANDEV_AGENT_RATE: '0', KANDEV_OPERATOR_RATE: '0', ...env }, opts);
  // The test observer's NATS user, signing as a service: the scenarios send its requests on the bus (ADR 0055).
  const signingAs = async (service: 'gateway' | 'orchestrator') => {
    const conn = await connectNats({ url: world.stack.nats.url, name: `bench-client-${service}`, ...natsLogin(world.stack.nats) });
    const identity = busIdentityFromEnv(service, world.stack.busEnv(service), false);
    if (identity) bindBusIdentity(conn, identity);
    return conn;
  };
  const nc = await signingAs('gateway');
  const asOrchestrator = await signingAs('orchestrator');
  let stopped: Promise<void> | undefined;
  const b: BenchStack = {
    ...world,
    nc,
    asOrchestrator,
    // Once, however often it is called (a scenario stops a stack early and defers the stop too).
    stop() {
      running.delete(b);
      stopped ??= Promise.all([nc.close(), asOrchestrator.close()]).then(() => world.stop());
      return stopped;
    },
  };
  running.add(b);
  return b;
}

/**
 * The last lines (warnings and errors, at the bench's LOG_LEVEL) each service of every running
 * stack wrote: a request that failed with INTERNAL_ERROR says no more than that to its caller.
 */
export function reportRunningStacks(write: (line: string) => void): void {
  for (const b of running) for (const name of STACK_SERVICES) for (const line of b.stack.logTail(name)) write(`[${name}] ${line}`);
}

/** CLOCK_MONOTONIC ms, the clock the scripted agents log as `mono`: exact across processes. */
export const preciseNow = monotonicNow;

/** A session of a fresh task whose agent is up and idle; returns its ids and pid. */
export async function idleSession(b: BenchStack, opts: { agent?: string; workspace_id?: string; parent_id?: string } = {}) {
  const workspace_id = opts.workspace_id ?? (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id;
  const task = await b.api.ok('POST', '/tasks', {
    workspace_id,
    title: 'bench',
    ...(opts.agent ? { agent: opts.agent } : {}),
    ...(opts.parent_id ? { parent_id: opts.parent_id } : {}),
  });
  const session = await b.api.ok('POST', `/tasks/${task.id}/sessions`, {});
  const detail = await eventually(async () =>
    (await b.api.get(`/sessions/${session.id}`)).body.execution ? (await b.api.get(`/sessions/${session.id}`)).body : null,
  );
  return { workspace_id, task, session, pid: detail.execution.pid as number, execution_id: detail.execution.execution_id as string };
}

/**
 * Reads the agents' observation log incrementally (only new bytes, plain JSON.parse), so waiting for
 * an event costs next to nothing: a poller that re-read and validated the whole file would steal the
 * CPU the measured processes need on a 2-core machine.
 */
class AgentLogTail {
  private fd: number;
  private offset = 0;
  private partial = '';
  private readonly buf = Buffer.alloc(1 << 16);
  private readonly seen: Array<AgentEvent & { mono: number }> = [];
  constructor(path: string) {
    writeFileSync(path, '', { flag: 'a' });
    this.fd = openSync(path, 'r');
  }
  poll(): void {
    for (;;) {
      const n = readSync(this.fd, this.buf, 0, this.buf.length, this.offset);
      if (n <= 0) return;
      this.offset += n;
      const text = this.partial + this.buf.subarray(0, n).toString('utf8');
      const lines = text.split('\n');
      this.partial = lines.pop() ?? '';
      for (const l of lines) if (l.trim()) this.seen.push(JSON.parse(l) as AgentEvent & { mono: number });
    }
  }
  /** Events from `since` on (monotonic ms), dropping older ones to keep scans short. */
  find(pid: number, since: number, pred: (e: AgentEvent) => boolean): (AgentEvent & { mono: number }) | undefined {
    this.poll();
    return this.seen.find((e) => e.pid === pid && e.mono >= since && pred(e));
  }
  trimBefore(since: number): void {
    const keep = this.seen.filter((e) => e.mono >= since);
    this.seen.length = 0;
    this.seen.push(...keep);
  }
  close(): void {
    closeSync(this.fd);
  }
}

const tails = new WeakMap<BenchStack, AgentLogTail>();

/** Wait until the agent with `pid` has logged an event matching `pred` at or after `since` (monotonic ms). */
export async function agentEventAfter(
  b: BenchStack,
  pid: number,
  since: number,
  pred: (e: AgentEvent) => boolean,
  timeoutMs = 10_000,
): Promise<AgentEvent & { mono: number }> {
  let tail = tails.get(b);
  if (!tail) tails.set(b, (tail = new AgentLogTail(b.eventsFile)));
  tail.trimBefore(since - 60_000);
  const end = Date.now() + timeoutMs;
  for (;;) {
    const hit = tail.find(pid, since, pred);
    if (hit) return hit;
    if (Date.now() > end) throw new Error('agent event not seen in time');
    await new Promise((r) => setTimeout(r, 0.5));
  }
}

/** An agent process as launched: (pid, start time) survives pid reuse (pid_max is 32,768 here). */
export interface AgentProcess {
  pid: number;
  start: string;
}

/** The agent process with `pid` as it runs now (null when it is already gone). */
export function agentProcess(pid: number): AgentProcess | null {
  const st = procStat(pid);
  return st && st.state !== 'Z' ? { pid, start: st.start } : null;
}

export interface AgentEnd {
  /** When it logged SIGTERM (monotonic ms), or null: it never ran its handler (killed after its grace). */
  sigterm: number | null;
  /** When it was first seen gone (monotonic ms; polled every few ms). */
  gone: number;
}

/**
 * Waits until every agent has gone, noting when each logged SIGTERM. One loop for all of them (a
 * waiter each would poll /proc a hundred times over on the cores the teardowns need). An agent that
 * gets no CPU within its grace period is SIGKILLed before its handler runs: it never logs SIGTERM
 * though it was sent one, so "every agent received SIGTERM" has to be read as "logged it, or gone".
 */
export async function agentsEnded(b: BenchStack, agents: readonly AgentProcess[], since: number, timeoutMs: number): Promise<AgentEnd[]> {
  let tail = tails.get(b);
  if (!tail) tails.set(b, (tail = new AgentLogTail(b.eventsFile)));
  tail.trimBefore(since - 60_000);
  const sigterm = new Map<number, number>();
  const gone = new Map<number, number>();
  const end = Date.now() + timeoutMs;
  for (;;) {
    for (const a of agents) {
      if (!sigterm.has(a.pid)) {
        const hit = tail.find(a.pid, since, (e) => e.kind === 'sigterm');
        if (hit) sigterm.set(a.pid, hit.mono);
      }
      if (!gone.has(a.pid) && !procAlive(a)) gone.set(a.pid, preciseNow());
    }
    if (gone.size === agents.length) return agents.map((a) => ({ sigterm: sigterm.get(a.pid) ?? null, gone: gone.get(a.pid)! }));
    if (Date.now() > end)
      throw new Error(
        `${agents.length - gone.size} of ${agents.length} agents still running after ${timeoutMs} ms: ${agents
          .filter((a) => !gone.has(a.pid))
          .map((a) => a.pid)
          .join(', ')}`,
      );
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Bare floors measured in the same run: a core NATS round trip and a loopback HTTP round trip. */
export async function natsAndHttpFloor(b: BenchStack, iterations: number): Promise<{ nats: Stats; http: Stats; natsSamples: number[]; httpSamples: number[] }> {
  const server = await connectNats({ url: b.stack.nats.url, name: 'bench-floor-responder', ...natsLogin(b.stack.nats) });
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
