import { Life, Orch } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { eventually, WsClient } from '@kandev/testkit';
import type { BenchContext, Scenario, ScenarioResult } from '../scenario.js';
import { duration, eventTime, startSpanCollector, traces, type CollectedSpan, type Trace } from '../spans.js';
import { agentEventAfter, e2eIterations, idleSession, natsAndHttpFloor, preciseNow, startBenchStack, summarize, summedFloor, type BenchStack } from '../e2e.js';

/** Where a /ws cancel spends its time, per trace (ACP agent): each segment a difference of durations or of one span's own events, so exact (span starts are only ms-precise across spans). */
const SEGMENTS: Array<[string, string]> = [
  ['client', '/ws client and socket outside the gateway span (round trip − gateway span)'],
  ['gateway', 'gateway: /ws frame handling outside its NATS request'],
  ['nats.orchestrator', 'gateway → orchestrator → gateway over NATS, both runtimes'],
  ['orchestrator.lock', 'orchestrator: a connection, then BEGIN + lock + open turn (one flight)'],
  ['orchestrator.send', 'orchestrator: checks, request built and sent (and its answer taken)'],
  ['nats.lifecycle', 'orchestrator → lifecycle → orchestrator over NATS, both runtimes'],
  ['lifecycle', 'lifecycle: turn fence, then the turn completed and the reply (outside its agentctl call)'],
  ['http.agentctl', 'lifecycle → agentctl → lifecycle over loopback HTTP (keep-alive)'],
  ['agentctl', 'agentctl: HTTP handling outside the cancel itself'],
  ['agent', 'agentctl: session/cancel written to the agent → the agent ended its turn (its acknowledgement)'],
  ['orchestrator.writes', 'orchestrator: answer → the writes issued, events staged, outbox rows and COMMIT sent'],
  ['orchestrator.commit', 'orchestrator: that flight answered (one fsync)'],
  ['orchestrator.reply', 'orchestrator: committed → reply sent'],
];

const inService = (t: Trace, service: string, name: string): CollectedSpan | undefined => t.spans.find((s) => s.service === service && s.name === name);

function breakdown(spans: readonly CollectedSpan[], roundTrips: readonly number[]): ScenarioResult[] {
  const out = new Map<string, number[]>(SEGMENTS.map(([k]) => [k, []]));
  const cancels = traces(spans)
    .map((t) => ({ t, root: inService(t, 'kandev-gateway', 'WS agent.cancel') }))
    .filter((x) => x.root && inService(x.t, 'kandev-agentctl', 'agentctl.cancel'))
    .sort((a, b) => a.root!.start - b.root!.start);
  const paired = cancels.length === roundTrips.length;
  cancels.forEach(({ t, root }, i) => {
    const gwSend = t.find('send kandev.orch.agent.cancel');
    const proc = t.find('process kandev.orch.agent.cancel');
    const lifeSend = t.find('send kandev.life.*');
    const lifeProc = t.find('process kandev.life.*');
    const lifeHttp = inService(t, 'kandev-lifecycle', 'POST /api/v1/acp/cancel');
    const ctlHttp = inService(t, 'kandev-agentctl', 'POST /api/v1/acp/cancel');
    const ctlCancel = inService(t, 'kandev-agentctl', 'agentctl.cancel');
    const at = (e: string) => eventTime(proc, e);
    const seg: Record<string, number> = {
      client: paired ? roundTrips[i]! - duration(root) : Number.NaN,
      gateway: duration(root) - duration(gwSend),
      'nats.orchestrator': duration(gwSend) - duration(proc),
      'orchestrator.lock': at('cancel.locked') - (proc?.start ?? Number.NaN),
      'orchestrator.send': at('cancel.answered') - at('cancel.locked') - duration(lifeSend),
      'nats.lifecycle': duration(lifeSend) - duration(lifeProc),
      lifecycle: duration(lifeProc) - duration(lifeHttp),
      'http.agentctl': duration(lifeHttp) - duration(ctlHttp),
      agentctl: duration(ctlHttp) - duration(ctlCancel),
      agent: duration(ctlCancel),
      'orchestrator.writes': at('transaction.commit_sent') - at('cancel.answered'),
      'orchestrator.commit': at('transaction.committed') - at('transaction.commit_sent'),
      'orchestrator.reply': (proc?.end ?? Number.NaN) - at('transaction.committed'),
    };
    for (const [k, v] of Object.entries(seg)) if (Number.isFinite(v)) out.get(k)!.push(v);
  });
  return SEGMENTS.filter(([k]) => out.get(k)!.length > 0).map(([k, label]) => ({
    id: `cancel.hop.${k}`,
    label: `scripted-acp /ws cancel: ${label}`,
    stats: summarize(out.get(k)!),
  }));
}

type Agent = 'scripted-acp' | 'scripted-codex';
const cancelMethodOf = (agent: Agent) => (agent === 'scripted-acp' ? 'session/cancel' : 'turn/interrupt');

/**
 * `count` cancels of a sleeping turn on /ws, after `warmup` unmeasured ones: each sent once the
 * agent has logged the turn's prompt, timed until the agent logs the protocol's cancel and until
 * the /ws response.
 */
async function wsCancels(b: BenchStack, ws: WsClient, agent: Agent, count: number, warmup: number): Promise<{ toAgent: number[]; roundTrip: number[] }> {
  const s = await idleSession(b, { agent });
  const cancelMethod = cancelMethodOf(agent);
  const toAgent: number[] = [];
  const roundTrip: number[] = [];
  for (let i = 0; i < count + warmup; i++) {
    const promptedAt = preciseNow();
    const r = await b.api.post(`/sessions/${s.session.id}/prompt`, { prompt: JSON.stringify({ script: [{ sleep_ms: 60_000 }] }) });
    if (r.status !== 202) throw new Error(`prompt failed: ${JSON.stringify(r.body)}`);
    // The turn is in flight at the agent once it logged the prompt.
    await agentEventAfter(b, s.pid, promptedAt, (e) => e.kind === 'prompt');
    const t0 = preciseNow();
    const res = await ws.request('agent.cancel', { session_id: s.session.id });
    const t1 = preciseNow();
    if (res.type !== 'response') throw new Error(`cancel failed: ${JSON.stringify(res.payload)}`);
    const recv = await agentEventAfter(b, s.pid, t0, (e) => e.kind === 'recv' && e.method === cancelMethod);
    if (i >= warmup) {
      toAgent.push(recv.mono - t0);
      roundTrip.push(t1 - t0);
    }
  }
  return { toAgent, roundTrip };
}

/**
 * The per-hop rows (`cancel.hop.*`) from a second stack whose every service exports its spans, and
 * that stack's own /ws figures beside them (`….traced`): what exporting costs is then in the table,
 * and the headline figures above come from a stack that exports nothing, as the system runs by
 * default and as the stop's do (12-stop-task-mcp).
 */
async function tracedCancels(ctx: BenchContext, count: number): Promise<ScenarioResult[]> {
  const collector = await startSpanCollector();
  ctx.defer(() => collector.stop());
  const traced = await startBenchStack({ OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_BSP_SCHEDULE_DELAY: '1000' });
  ctx.defer(() => traced.stop());
  const ws = await WsClient.connect(traced.stack.wsUrl, traced.token);
  ctx.defer(() => ws.close());
  const warmup = 10;
  const { toAgent, roundTrip } = await wsCancels(traced, ws, 'scripted-acp', count, warmup);
  // Every round trip has its trace (spans leave in batches); the first ones were warm-up.
  const complete = () =>
    traces(collector.spans()).filter(
      (t) =>
        inService(t, 'kandev-gateway', 'WS agent.cancel') &&
        inService(t, 'kandev-agentctl', 'agentctl.cancel') &&
        t.find('process kandev.orch.agent.cancel')?.events.some((e) => e.name === 'transaction.committed'),
    );
  await eventually(async () => complete().length >= count + warmup, 15_000, 100).catch(() => undefined);
  const warm = traces(collector.spans())
    .map((t) => inService(t, 'kandev-gateway', 'WS agent.cancel'))
    .filter((s): s is CollectedSpan => !!s)
    .sort((x, y) => x.start - y.start)
    .slice(0, warmup);
  const skip = new Set(warm.map((s) => s.traceId));
  return [
    {
      id: 'cancel.scripted-acp.to_agent.traced',
      label: 'scripted-acp, every service exporting its spans: agent.cancel sent on /ws → agent receives session/cancel',
      stats: summarize(toAgent),
      baseline: 'floor.nats+http',
    },
    {
      id: 'cancel.scripted-acp.ws_round_trip.traced',
      label: 'scripted-acp, every service exporting its spans: agent.cancel sent → /ws response',
      stats: summarize(roundTrip),
      baseline: 'floor.nats+http',
    },
    ...breakdown(
      collector.spans().filter((s) => !skip.has(s.traceId)),
      roundTrip,
    ),
  ];
}

/**
 * R-3 latency: `agent.cancel` sent on /ws until the scripted agent receives the protocol's cancel
 * (`session/cancel` for ACP, `turn/interrupt` for Codex; the agent logs the instant), and until the
 * WebSocket response arrives (the turn has resolved `cancelled`). Floor: a bare NATS round trip plus a
 * bare loopback HTTP round trip, measured in the same run.
 */
const scenario: Scenario = {
  name: 'agent.cancel on /ws to the agent',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const iterations = e2eIterations(200);
    // Nothing exports here (no OTLP endpoint), as the system runs by default.
    const b = await startBenchStack();
    ctx.defer(() => b.stop());
    const floor = await natsAndHttpFloor(b, 500);
    const results: ScenarioResult[] = [
      { id: 'floor.nats.request', label: 'bare NATS round trip (same run as the cancel figures)', stats: floor.nats },
      { id: 'floor.http.loopback', label: 'bare loopback HTTP POST round trip (fetch → node:http)', stats: floor.http },
      { id: 'floor.nats+http', label: 'sum of the two floors (pairwise samples)', stats: summedFloor(floor.natsSamples, floor.httpSamples) },
    ];
    const ws = await WsClient.connect(b.stack.wsUrl, b.token);
    ctx.defer(() => ws.close());
    for (const agent of ['scripted-acp', 'scripted-codex'] as const) {
      const { toAgent, roundTrip } = await wsCancels(b, ws, agent, iterations, 10);
      results.push(
        {
          id: `cancel.${agent}.to_agent`,
          label: `${agent}: agent.cancel sent on /ws → agent receives ${cancelMethodOf(agent)}`,
          stats: summarize(toAgent),
          baseline: 'floor.nats+http',
        },
        {
          id: `cancel.${agent}.ws_round_trip`,
          label: `${agent}: agent.cancel sent → /ws response (turn resolved cancelled, session WAITING_FOR_INPUT)`,
          stats: summarize(roundTrip),
          baseline: 'floor.nats+http',
        },
      );
      ctx.log(`${agent}: to agent p50 ${summarize(toAgent).p50.toFixed(2)} ms, round trip p50 ${summarize(roundTrip).p50.toFixed(2)} ms`);
    }

    // Where the time goes: the same cancel entered one hop further down each time (ACP agent), timed
    // until the agent receives it and until that hop answers. Each difference between two entries is
    // what one hop adds, in both directions, measured in this run. agentctl itself cannot be entered:
    // it takes only callers holding its execution secret, which only the lifecycle has, so
    // the lifecycle entry's figure includes agentctl's hop.
    const s = await idleSession(b, { agent: 'scripted-acp' });
    const execution = (await request(b.nc, Life.get, { execution_id: s.execution_id }))!;
    const operator = { type: 'operator' as const, id: 'bench', workspaces: ['*'] };
    const entries = {
      orchestrator: (_turn: string) => request(b.nc, Orch.agentCancel, { actor: operator, session_id: s.session.id }),
      lifecycle: (turn: string) => request(b.asOrchestrator, Life.cancel.at(execution.instance_id), { execution_id: s.execution_id, turn_id: turn }),
    };
    for (const [hop, send] of Object.entries(entries)) {
      const toAgent: number[] = [];
      const answered: number[] = [];
      for (let i = 0; i < Math.min(iterations, 100) + 5; i++) {
        const promptedAt = preciseNow();
        const { turn_id } = (await b.api.ok('POST', `/sessions/${s.session.id}/prompt`, { prompt: JSON.stringify({ script: [{ sleep_ms: 60_000 }] }) })) as {
          turn_id: string;
        };
        await agentEventAfter(b, s.pid, promptedAt, (e) => e.kind === 'prompt');
        const t0 = preciseNow();
        const done = send(turn_id);
        const recv = await agentEventAfter(b, s.pid, t0, (e) => e.kind === 'recv' && e.method === 'session/cancel');
        const reply = await done;
        const t1 = preciseNow();
        if (reply instanceof Response) await reply.text();
        // Entered below the orchestrator, the session still says RUNNING: let its turn-completed handler settle it.
        await eventually(async () => (await b.api.get(`/sessions/${s.session.id}`)).body.state === 'WAITING_FOR_INPUT');
        if (i >= 5) {
          toAgent.push(recv.mono - t0);
          answered.push(t1 - t0);
        }
      }
      results.push(
        {
          id: `cancel.breakdown.from_${hop}`,
          label: `scripted-acp: cancel entered at the ${hop} → agent receives session/cancel`,
          stats: summarize(toAgent),
          baseline: 'floor.nats+http',
        },
        {
          id: `cancel.breakdown.from_${hop}.answered`,
          label: `scripted-acp: cancel entered at the ${hop} → the ${hop} answers (turn ended${hop === 'orchestrator' ? ', session committed' : ''})`,
          stats: summarize(answered),
          baseline: 'floor.nats+http',
        },
      );
    }
    ctx.log('per-hop breakdown: a stack exporting its spans');
    return [...results, ...(await tracedCancels(ctx, Math.min(iterations, 100)))];
  },
};
export default scenario;
