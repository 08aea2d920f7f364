import { Life, Orch } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { eventually, WsClient } from '@kandev/testkit';
import type { Scenario, ScenarioResult } from '../scenario.js';
import { agentEventAfter, e2eIterations, idleSession, natsAndHttpFloor, preciseNow, startBenchStack, summarize, summedFloor } from '../e2e.js';

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
      const s = await idleSession(b, { agent });
      const cancelMethod = agent === 'scripted-acp' ? 'session/cancel' : 'turn/interrupt';
      const toAgent: number[] = [];
      const roundTrip: number[] = [];
      for (let i = 0; i < iterations + 10; i++) {
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
        if (i >= 10) {
          toAgent.push(recv.mono - t0);
          roundTrip.push(t1 - t0);
        }
      }
      results.push(
        { id: `cancel.${agent}.to_agent`, label: `${agent}: agent.cancel sent on /ws → agent receives ${cancelMethod}`, stats: summarize(toAgent), baseline: 'floor.nats+http' },
        { id: `cancel.${agent}.ws_round_trip`, label: `${agent}: agent.cancel sent → /ws response (turn resolved cancelled, session WAITING_FOR_INPUT)`, stats: summarize(roundTrip), baseline: 'floor.nats+http' },
      );
      ctx.log(`${agent}: to agent p50 ${summarize(toAgent).p50.toFixed(2)} ms, round trip p50 ${summarize(roundTrip).p50.toFixed(2)} ms`);
    }

    // Where the time goes: the same cancel entered one hop further down each time (ACP agent), timed
    // until the agent receives it and until that hop answers. Each difference between two entries is
    // what one hop adds, in both directions, measured in this run.
    const s = await idleSession(b, { agent: 'scripted-acp' });
    const execution = (await request(b.nc, Life.get, { execution_id: s.execution_id }))!;
    const operator = { type: 'operator' as const, id: 'bench', workspaces: ['*'] };
    const entries = {
      orchestrator: (_turn: string) => request(b.nc, Orch.agentCancel, { actor: operator, session_id: s.session.id }),
      lifecycle: (turn: string) => request(b.nc, Life.cancel.at(execution.instance_id), { execution_id: s.execution_id, turn_id: turn }),
      agentctl: (turn: string) => fetch(`${execution.agentctl_url}/api/v1/acp/cancel`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ turn_id: turn }) }),
    };
    for (const [hop, send] of Object.entries(entries)) {
      const toAgent: number[] = [];
      const answered: number[] = [];
      for (let i = 0; i < Math.min(iterations, 100) + 5; i++) {
        const promptedAt = preciseNow();
        const { turn_id } = (await b.api.ok('POST', `/sessions/${s.session.id}/prompt`, { prompt: JSON.stringify({ script: [{ sleep_ms: 60_000 }] }) })) as { turn_id: string };
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
        { id: `cancel.breakdown.from_${hop}`, label: `scripted-acp: cancel entered at the ${hop} → agent receives session/cancel`, stats: summarize(toAgent), baseline: 'floor.nats+http' },
        { id: `cancel.breakdown.from_${hop}.answered`, label: `scripted-acp: cancel entered at the ${hop} → the ${hop} answers (turn ended${hop === 'orchestrator' ? ', session committed' : ''})`, stats: summarize(answered), baseline: 'floor.nats+http' },
      );
    }
    return results;
  },
};
export default scenario;
