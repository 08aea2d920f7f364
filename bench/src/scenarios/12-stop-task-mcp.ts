import postgres from 'postgres';
import { connectNats } from '@kandev/runtime';
import { connectMcp, natsLogin, eventually, processAlive } from '@kandev/testkit';
import { cpuSnapshot, cpuSpent, CORES, settled, type CpuSpent } from '../cpu.js';
import { startSdkNoopServer } from '../mcp-floor.js';
import { startDesignFloor, type DesignFloorHops } from '../design-floor.js';
import type { Scenario, ScenarioResult } from '../scenario.js';
import { duration, eventTime, startSpanCollector, traces, type SpanCollector } from '../spans.js';
import { e2eIterations, natsAndHttpFloor, samples, startBenchStack, summarize, summedFloor, type BenchStack } from '../e2e.js';
import { family, stopChild as stop, type Mcp } from '../families.js';

/**
 * Where a stop of a running child spends its time, per trace: every service exports its spans to
 * the bench (OTLP), and the orchestrator marks the steps of a stop as events on its request span.
 * Each segment is a difference of timestamps taken in one process (exact); `client` pairs the
 * i-th client sample with the i-th trace (sequential stops only).
 */
const SEGMENTS: Array<[string, string]> = [
  ['client', 'MCP SDK client + HTTP + the mcp service outside its tool span (client sample − tool span)'],
  ['mcp', 'mcp service: tool span minus its NATS request (argument validation, log line)'],
  ['nats', 'mcp → orchestrator → mcp over NATS, both runtimes (request span − handler span)'],
  ['orch.reserve', 'orchestrator: token check (cached) + a pooled connection reserved for the transaction'],
  ['orch.lock', 'orchestrator: BEGIN + checks read + fence bump + session locks (one flight); the registry listing runs alongside'],
  ['orch.registry_wait', 'orchestrator: waiting for the registry after the locks'],
  [
    'orch.write_issue',
    'orchestrator: decision, events built, the writes (CANCELLED, turn, bundles, audit row, REVIEW) issued, until the outbox rows and COMMIT go behind them',
  ],
  ['orch.write_commit', 'orchestrator: that flight answered: the writes, outbox rows and COMMIT (one fsync)'],
  ['orch.reply', 'orchestrator: committed → reply sent'],
  ['registry_read', 'the registry listing itself, read from its bucket as the stop arrives (overlapped with the first flight)'],
];

function breakdown(collector: SpanCollector, clientSamples: readonly number[]): Map<string, number[]> {
  const out = new Map<string, number[]>(SEGMENTS.map(([k]) => [k, []]));
  const stops = traces(collector.spans())
    .map((t) => ({ t, root: t.find('tools/call stop_task_kandev') }))
    // A running child's stop reads its executions (a not_running one has none to read).
    .filter((x) => x.root && Number.isFinite(eventTime(x.t.find('process kandev.orch.mcp.stop_child_task'), 'stop.registry_read')))
    .sort((a, b) => a.root!.start - b.root!.start);
  const paired = stops.length === clientSamples.length;
  stops.forEach(({ t, root }, i) => {
    const send = t.find('send kandev.orch.mcp.stop_child_task');
    const proc = t.find('process kandev.orch.mcp.stop_child_task');
    const at = (e: string) => eventTime(proc, e);
    const seg: Record<string, number> = {
      client: paired ? clientSamples[i]! - duration(root) : Number.NaN,
      mcp: duration(root) - duration(send),
      nats: duration(send) - duration(proc),
      'orch.reserve': at('transaction.reserved') - (proc?.start ?? Number.NaN),
      'orch.lock': at('stop.locked') - at('transaction.reserved'),
      'orch.registry_wait': at('stop.registry_read') - at('stop.locked'),
      'orch.write_issue': at('transaction.commit_sent') - at('stop.registry_read'),
      'orch.write_commit': at('transaction.committed') - at('transaction.commit_sent'),
      'orch.reply': (proc?.end ?? Number.NaN) - at('transaction.committed'),
      registry_read: at('stop.registry_listed') - (proc?.start ?? Number.NaN),
    };
    for (const [k, v] of Object.entries(seg)) if (Number.isFinite(v)) out.get(k)!.push(v);
  });
  return out;
}

/** Spans leave the services in batches (OTEL_BSP_SCHEDULE_DELAY): wait until every stop's trace is in. */
async function collected(collector: SpanCollector, stops: number): Promise<void> {
  await eventually(
    async () =>
      traces(collector.spans()).filter(
        (t) => t.find('tools/call stop_task_kandev') && Number.isFinite(eventTime(t.find('process kandev.orch.mcp.stop_child_task'), 'stop.registry_read')),
      ).length >= stops,
    15_000,
    100,
  ).catch(() => undefined);
}

function breakdownRows(collector: SpanCollector, clientSamples: readonly number[], callers: number): ScenarioResult[] {
  const segments = breakdown(collector, clientSamples);
  return SEGMENTS.filter(([k]) => segments.get(k)!.length > 0).map(([k, label]) => ({
    id: `stop_task.hop.${callers}.${k}`,
    label: `${callers} caller${callers > 1 ? 's' : ''}: ${label}`,
    stats: summarize(segments.get(k)!),
  }));
}

/** The paced design floor per hop, beside the stop's own `stop_task.hop.1.*` rows (the same segments, nothing of ours in them). */
function designHopRows(calls: readonly DesignFloorHops[]): ScenarioResult[] {
  const segments: Array<[keyof DesignFloorHops, string]> = [
    ['client', 'MCP SDK client + HTTP + the SDK server outside its NATS request'],
    ['nats', 'relay → decider → relay over NATS, both processes'],
    ['reserve', 'decider: a pooled connection reserved'],
    ['lock', 'decider: BEGIN + row lock (one flight)'],
    ['commit', 'decider: write + COMMIT (one flight, one fsync)'],
    ['reply', 'decider: committed → reply sent'],
  ];
  return segments.map(([k, label]) => ({ id: `floor.design.hop.${k}`, label: `design floor, paced: ${label}`, stats: summarize(calls.map((c) => c[k])) }));
}

/** Quiet before each 1-caller stop (after its predecessor's agent is gone), and before each paced floor sample. */
const PACE_MS = 250;

/**
 * The floor chain: the MCP SDK's no-op tool (on the caller's client), then a bare NATS round trip,
 * then a PostgreSQL commit on a pool of `poolMax` connections. Each call of `chain` is one sample.
 */
async function floorChain(b: BenchStack, name: string, poolMax: number) {
  const subject = `bench.floor.${name}`;
  const responder = await connectNats({ url: b.stack.nats.url, name: `bench-${name}-floor-responder`, ...natsLogin(b.stack.nats) });
  const body = new TextEncoder().encode('{"ok":true}');
  responder.subscribe(subject, { callback: (_e, m) => void m.respond(body) });
  await responder.flush();
  const sql = postgres(b.stack.db.url, { max: poolMax, onnotice: () => undefined });
  await sql`CREATE TABLE IF NOT EXISTS public.bench_commit (id bigserial primary key, v int)`;
  return {
    async chain(client: Mcp): Promise<number> {
      const t = performance.now();
      await client.callTool({ name: 'noop', arguments: {} });
      await b.nc.request(subject, body, { timeout: 10_000 });
      await sql.begin((tx) => tx`INSERT INTO public.bench_commit (v) VALUES (1)`);
      return performance.now() - t;
    },
    async close() {
      await sql.end();
      await responder.close();
    },
  };
}

/**
 * The floor as one chain, sampled the way the 1-caller stops are: each sample after PACE_MS of
 * quiet. A chain of processes that all went idle pays each one's wake-up (on this VM the SDK's no-op
 * alone reads about 1.7× slower after 250 ms idle than back to back, bench/src/scenarios/05-mcp-floor.ts),
 * so a stop measured that way is compared with a floor measured the same way, beside the
 * back-to-back floor (`floor.mcp+nats+pg`).
 */
async function pacedFloorChain(b: BenchStack, noop: Mcp) {
  const floor = await floorChain(b, 'paced', 1);
  return {
    async sample(): Promise<number> {
      await new Promise((r) => setTimeout(r, PACE_MS));
      return floor.chain(noop);
    },
    close: () => floor.close(),
  };
}

/**
 * The floor at N concurrent callers, each its own MCP client as each stopping coordinator is: every
 * caller runs the floor chain at once (its commits on a pool of 10, as a service's), round after
 * round. What the same machine gives the plumbing alone at that concurrency, with no agent to tear
 * down; and its CPU, for the budget.
 */
async function concurrentFloorChain(b: BenchStack, sdkUrl: string, callers: number, rounds: number) {
  const clients = await Promise.all(Array.from({ length: callers }, () => connectMcp(sdkUrl, 'unused')));
  const floor = await floorChain(b, `concurrent${callers}`, 10);
  try {
    await Promise.all(clients.map((c) => floor.chain(c))); // warm-up round
    const out: number[] = [];
    const cpu: CpuSpent[] = [];
    for (let r = 0; r < rounds; r++) {
      const before = cpuSnapshot();
      out.push(...(await Promise.all(clients.map((c) => floor.chain(c)))));
      cpu.push(cpuSpent(before, cpuSnapshot()));
    }
    return { samples: out, cpu };
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await floor.close();
  }
}

/** A burst's CPU per stop by process kind, largest first (processes that exited inside it are only in the machine's total). */
const cpuByKind = (cpu: CpuSpent, calls: number): string =>
  Object.entries(cpu.byKind)
    .filter(([, ms]) => ms > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([kind, ms]) => `${kind} ${(ms / calls).toFixed(1)}`)
    .join(', ');

/** Rows of a burst's CPU: the machine's per call, the orchestrator's per call, the share of both cores busy. */
function cpuRows(prefix: string, what: string, bursts: readonly CpuSpent[], calls: number, orchestrator: boolean): ScenarioResult[] {
  const rows: ScenarioResult[] = [
    {
      id: `${prefix}.machine`,
      label: `${what}: CPU of the whole machine (all processes, kernel) while the burst ran, ms per call`,
      stats: summarize(bursts.map((c) => c.machineMs / calls)),
    },
    {
      id: `${prefix}.busy`,
      label: `${what}: share of the ${CORES} cores busy while the burst ran, percent (not ms)`,
      stats: summarize(bursts.map((c) => 100 * c.busyShare)),
    },
  ];
  if (orchestrator)
    rows.push({
      id: `${prefix}.orchestrator`,
      label: `${what}: the orchestrator process's CPU, ms per call (one thread: ${calls} calls cannot finish before ${calls} × this)`,
      stats: summarize(bursts.map((c) => (c.byKind.orchestrator ?? 0) / calls)),
    });
  return rows;
}

/** One stop at a time, each after PACE_MS of quiet, each waiting for its agent to be gone; `beforeEach` samples the paced floor. */
async function singleCallerStops(b: BenchStack, n: number, beforeEach?: () => Promise<void>): Promise<{ samples: number[]; close: () => Promise<void> }> {
  const one = await family(b, n);
  const samples: number[] = [];
  for (const child of one.children) {
    await beforeEach?.();
    await new Promise((r) => setTimeout(r, PACE_MS));
    samples.push(await stop(one.mcp, child));
    // One stop at a time on a quiet machine: the previous child's teardown (SIGTERM, two node
    // processes exiting, its events) would otherwise share the 2 cores with the next stop.
    // Waits for the agent process itself to be gone (a /proc check, nothing asked of the system
    // being measured).
    await eventually(async () => !processAlive(one.pids.get(child)!), 30_000);
    await new Promise((r) => setTimeout(r, PACE_MS));
  }
  return { samples, close: () => one.mcp.close() };
}

/** `callers` families launched a few at a time, then every child stopped at once; `beforeBurst` runs once they are launched. */
async function burstOfStops(
  b: BenchStack,
  callers: number,
  beforeBurst?: () => Promise<void>,
): Promise<{ samples: number[]; cpu: CpuSpent; settledMs: number | null }> {
  // Launch a few at a time (each child is two node processes starting on 2 cores), then stop all at once.
  const families: Array<Awaited<ReturnType<typeof family>>> = [];
  for (let i = 0; i < callers; i += 8) families.push(...(await Promise.all(Array.from({ length: Math.min(8, callers - i) }, () => family(b, 1)))));
  // Once the fresh agents have finished starting: their tail after "ready" would share the burst's cores.
  const settledMs = await settled(['agent', 'agentctl']);
  await beforeBurst?.();
  const before = cpuSnapshot();
  const samples = await Promise.all(families.map((c) => stop(c.mcp, c.children[0]!)));
  const cpu = cpuSpent(before, cpuSnapshot());
  for (const c of families) await c.mcp.close();
  // The next burst starts once this one's agents are gone (their teardown is not measured).
  await eventually(async () => families.every((c) => !processAlive(c.pids.get(c.children[0]!)!)), 60_000);
  return { samples, cpu, settledMs };
}

/**
 * R-1 latency: `stop_task_kandev` through a real MCP client (Streamable HTTP) to a real orchestrator,
 * lifecycle and agent, each call stopping a child with a turn in flight. At 1 caller and at 10 and
 * 50 concurrent callers. Floor, measured in the same run: the MCP SDK's own stateless server answering a
 * no-op tool + a bare NATS round trip + a bare PostgreSQL commit.
 *
 * Two stacks. The figures come from one that exports no spans, as the system runs by default
 * (no OTEL_EXPORTER_OTLP_ENDPOINT): exporting costs the orchestrator about 1 ms of CPU per stop, and
 * the collector (in this process) shares the cores with the clients. The per-hop rows come from a
 * second stack whose services export every span to the bench.
 */
const scenario: Scenario = {
  name: 'stop_task_kandev end to end',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const iterations = e2eIterations(40);
    // Concurrent callers, each level its own run (1, 10 and 50: docs/fast-paths.md).
    const levels = (process.env.BENCH_STOP_CONCURRENCY ?? '10,50')
      .split(',')
      .map(Number)
      .filter((n) => n > 1);
    const b = await startBenchStack({ TEARDOWN_GRACE_MS: '500' });
    ctx.defer(() => b.stop());

    const floor = await natsAndHttpFloor(b, 500);
    const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
    await sql`CREATE TABLE IF NOT EXISTS public.bench_commit (id bigserial primary key, v int)`;
    const pg = await samples(() => sql.begin((tx) => tx`INSERT INTO public.bench_commit (v) VALUES (1)`), 500);
    await sql.end();
    // The MCP floor: the SDK's own stateless server answering a no-op tool, not our service.
    const sdk = await startSdkNoopServer();
    ctx.defer(() => sdk.stop());
    const noop = await connectMcp(sdk.url, 'unused');
    ctx.defer(() => noop.close());
    const mcpNoop = await samples(() => noop.callTool({ name: 'noop', arguments: {} }), 500);
    const paced = await pacedFloorChain(b, noop);
    // The design floor: the prescribed path (MCP → NATS → two PostgreSQL round trips) with nothing of ours on it.
    const design = await startDesignFloor(b.stack.nats.url, b.stack.db.url, natsLogin(b.stack.nats));
    ctx.defer(() => design.stop());
    const designHot = await samples(() => design.call(), 300);

    // Not-running stops are cheap to repeat: the decision path without a live child.
    const idle = await family(b, 0);
    const idleChild = (await b.api.ok('POST', '/tasks', { workspace_id: idle.parent.workspace_id, title: 'idle', parent_id: idle.parent.id })).id;
    const notRunning = await samples(() => idle.mcp.callJson('stop_task_kandev', { task_id: idleChild }), 300);
    await idle.mcp.close();

    ctx.log(`launching ${iterations} children for the 1-caller run`);
    const pacedFloor: number[] = [];
    const pacedDesign: DesignFloorHops[] = [];
    // Both floors sampled after the same quiet as each stop (see pacedFloorChain), one of each before each stop.
    const one = await singleCallerStops(b, iterations, async () => {
      pacedFloor.push(await paced.sample());
      await new Promise((r) => setTimeout(r, PACE_MS));
      pacedDesign.push(await design.hops());
    });
    await one.close();
    await paced.close();
    await design.stop();
    const single = one.samples;

    const concurrent: ScenarioResult[] = [];
    const cpu: ScenarioResult[] = [];
    for (const callers of levels) {
      const floorN = await concurrentFloorChain(b, sdk.url, callers, 10);
      concurrent.push({
        id: `floor.mcp+nats+pg.${callers}`,
        label: `the floor chain (MCP SDK no-op, NATS round trip, PostgreSQL commit on a pool of 10), ${callers} concurrent callers each with its own MCP client`,
        stats: summarize(floorN.samples),
      });
      cpu.push(...cpuRows(`floor.cpu.${callers}`, `floor chain, ${callers} concurrent callers`, floorN.cpu, callers, false));
      ctx.log(`launching ${callers} children for each of two ${callers}-caller bursts`);
      const bursts = [await burstOfStops(b, callers), await burstOfStops(b, callers)];
      // Which processes a burst's CPU went to, per stop: a disturbed burst shows here by its kind.
      bursts.forEach((x, i) => {
        const settle = x.settledMs === null ? 'agents never settled' : `agents settled ${Math.round(x.settledMs)} ms after launch`;
        ctx.log(
          `${callers}-caller burst ${i + 1} (${settle}): ${Math.round(x.cpu.wallMs)} ms, machine ${(x.cpu.machineMs / callers).toFixed(1)} ms CPU per stop; ${cpuByKind(x.cpu, callers)}`,
        );
      });
      const many = bursts.flatMap((x) => x.samples);
      concurrent.push({
        id: `stop_task.stopped.${callers}`,
        label: `stop_task_kandev, ${callers} concurrent callers each stopping its own child`,
        stats: summarize(many),
        baseline: 'floor.mcp+nats+pg',
      });
      concurrent.push({
        id: `stop_task.stopped.${callers}.vs_floor_${callers}`,
        label: `the same samples against the floor chain at ${callers} concurrent callers`,
        stats: summarize(many),
        baseline: `floor.mcp+nats+pg.${callers}`,
      });
      cpu.push(
        ...cpuRows(
          `stop_task.cpu.${callers}`,
          `stop_task_kandev, ${callers} concurrent callers`,
          bursts.map((x) => x.cpu),
          callers,
          true,
        ),
      );
    }
    await b.stop(); // before the second stack starts

    // Where the time goes: a second stack whose services export every span to the bench.
    ctx.log('per-hop breakdown: a stack exporting its spans');
    const collector = await startSpanCollector();
    ctx.defer(() => collector.stop());
    const traced = await startBenchStack({ TEARDOWN_GRACE_MS: '500', OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_BSP_SCHEDULE_DELAY: '1000' });
    ctx.defer(() => traced.stop());
    // Cleared once the children are launched, before the first stop: each stop's trace pairs with its client sample.
    let launched = false;
    const tracedOne = await singleCallerStops(traced, Math.min(iterations, 20), async () => {
      if (!launched) collector.clear();
      launched = true;
    });
    await tracedOne.close();
    await collected(collector, tracedOne.samples.length);
    const hops = breakdownRows(collector, tracedOne.samples, 1);
    const hopCallers = Math.max(1, ...levels);
    if (hopCallers > 1) {
      await burstOfStops(traced, hopCallers, async () => collector.clear());
      await collected(collector, hopCallers);
      hops.push(...breakdownRows(collector, [], hopCallers));
    }

    return [
      {
        id: 'floor.mcp.noop',
        label: "MCP SDK's stateless Streamable HTTP server (own process) answering a no-op tools/call, same run",
        stats: summarize(mcpNoop),
      },
      { id: 'floor.pg.commit.stop_run', label: 'bare PostgreSQL commit (BEGIN/INSERT/COMMIT), same run', stats: summarize(pg) },
      {
        id: 'floor.mcp+nats+pg',
        label: 'sum of floors: MCP no-op + NATS round trip + PostgreSQL commit (pairwise)',
        stats: summedFloor(mcpNoop, floor.natsSamples, pg),
      },
      {
        id: 'stop_task.not_running',
        label: 'stop_task_kandev on a child with nothing running (checks + registry lookup)',
        stats: summarize(notRunning),
        baseline: 'floor.mcp+nats+pg',
      },
      {
        id: 'floor.mcp+nats+pg.paced',
        label: `the same floor as one chain (MCP no-op, NATS round trip, PostgreSQL commit, back to back), each sample after ${PACE_MS} ms of quiet as each 1-caller stop`,
        stats: summarize(pacedFloor),
      },
      {
        id: 'floor.design',
        label:
          'design floor: MCP SDK server → NATS → a decider making two PostgreSQL round trips (BEGIN + row lock; write + COMMIT), nothing of ours, back to back',
        stats: summarize(designHot),
        baseline: 'floor.mcp+nats+pg',
      },
      {
        id: 'floor.design.paced',
        label: `the design floor sampled as the 1-caller stops are (${PACE_MS} ms of quiet before each), against the issue's floor paced alike`,
        stats: summarize(pacedDesign.map((d) => d.total)),
        baseline: 'floor.mcp+nats+pg.paced',
      },
      ...designHopRows(pacedDesign),
      {
        id: 'stop_task.stopped.1',
        label: 'stop_task_kandev stopping a child with a turn in flight, 1 caller',
        stats: summarize(single),
        baseline: 'floor.mcp+nats+pg',
      },
      {
        id: 'stop_task.stopped.1.paced',
        label: `the same samples against the floor paced as they are (${PACE_MS} ms of quiet before each)`,
        stats: summarize(single),
        baseline: 'floor.mcp+nats+pg.paced',
      },
      {
        id: 'stop_task.stopped.1.vs_design',
        label: 'the same samples against the design floor paced alike: what our code adds to the prescribed path',
        stats: summarize(single),
        baseline: 'floor.design.paced',
      },
      ...concurrent,
      ...hops,
      ...cpu,
    ];
  },
};
export default scenario;
