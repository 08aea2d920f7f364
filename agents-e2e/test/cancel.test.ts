import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { EventEnvelope } from '@kandev/contracts';
import { costOf } from '@kandev/contracts/pricing';
import { eventually, natsLogin, processAlive, stubPrompt, UNPRICED_MODEL, WsClient } from '@kandev/testkit';
import { CODEX_MODEL, makeTask, REAL_AGENTS, requestFor, runningSession, reportOnFailure, startRealWorld, type RealWorld } from './support.js';

/**
 * R-3 against the published agents: `agent.cancel` over /ws while the model stream is open. The
 * agent must abort its model request (the stub sees the client close the stream), the turn ends
 * `cancelled`, and the same agent process takes the next prompt.
 */
let w: RealWorld;
reportOnFailure(() => w);
const usage: Array<{ session_id: string | null | undefined; data: Record<string, unknown> }> = [];
let stopUsage: (() => Promise<void>) | undefined;

beforeAll(async () => {
  w = await startRealWorld();
  const nc = await connect({ servers: w.stack.nats.url, ...natsLogin(w.stack.nats) });
  const sub = nc.subscribe('kandev.evt.usage.recorded');
  void (async () => {
    for await (const m of sub) {
      const env = EventEnvelope.parse(m.json());
      usage.push({ session_id: env.session_id, data: env.data as Record<string, unknown> });
    }
  })();
  stopUsage = () => nc.drain();
});
afterAll(async () => {
  await stopUsage?.();
  await w?.stop();
});

describe.each(REAL_AGENTS)('turn cancel with the published %s agent', (agent) => {
  it('aborts the open model stream, ends the turn cancelled, keeps the agent and completes the next prompt', async () => {
    const marker = `cancel-${agent}-${Date.now()}`;
    const { task } = await makeTask(w.api, { agent });
    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      await ws.request('subscribe', { task_id: task.id });
      const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: stubPrompt({ slow: { ms: 120_000, every_ms: 200 } }, marker) });
      const pid = (await runningSession(w.api, session.id)).execution.pid as number;
      // The model stream for this prompt is open: the turn is live inside the agent.
      const stream = await eventually(async () => {
        const req = requestFor(w.stub, marker);
        return req ? w.stub.streams.find((s) => s.request === req.index && s.endedAt === undefined) : undefined;
      }, 60_000);

      const res = await ws.request('agent.cancel', { session_id: session.id });
      expect(res).toMatchObject({ type: 'response', action: 'agent.cancel', payload: { success: true, session_id: session.id } });
      await ws.waitFor((f) => f.action === 'session.agent.cancelled' && f.payload.session_id === session.id, 30_000);

      await eventually(async () => stream.endedAt !== undefined, 10_000);
      expect(stream.closedByClient).toBe(true);
      const after = (await w.api.get(`/sessions/${session.id}`)).body;
      expect(after.state).toBe('WAITING_FOR_INPUT');
      expect(after.execution).toMatchObject({ status: 'READY', pid });
      expect(after.turns[0].stop_reason).toBe('cancelled');
      expect(processAlive(pid)).toBe(true);

      // The same process answers a new prompt, which completes normally.
      const again = `again-${marker}`;
      expect((await w.api.post(`/sessions/${session.id}/prompt`, { prompt: stubPrompt({ say: 'all done' }, again) })).status).toBe(202);
      const done = await eventually(async () => {
        const s = (await w.api.get(`/sessions/${session.id}`)).body;
        return s.turns.length === 2 && s.turns[1].completed_at ? s : null;
      }, 60_000);
      expect(done.turns[1].stop_reason).toBe('end_turn');
      expect(done.state).toBe('WAITING_FOR_INPUT');
      expect(done.execution).toMatchObject({ status: 'READY', pid });
      expect(requestFor(w.stub, again)).toBeDefined();

      if (agent === 'gemini') {
        // Gemini CLI reports per-prompt tokens per model on the session/prompt answer (_meta.quota);
        // gemini-2.5-pro has no row in pricing.ts, so the report is unpriced, not free.
        const recorded = await eventually(async () => usage.find((u) => u.session_id === session.id && u.data.tokens_out === 40), 10_000);
        expect(recorded.data).toMatchObject({ model: 'gemini-2.5-pro', tokens_in: 1200, tokens_out: 40, cost_cents: 0, priced: false });
      }
      if (agent === 'codex') {
        // Codex reports tokens (thread/tokenUsage/updated) and no money: the cost is the price table's.
        const tokens = { tokens_in: 1200, tokens_cached_in: 200, tokens_out: 40 };
        const recorded = await eventually(async () => usage.find((u) => u.session_id === session.id && u.data.tokens_out === 40), 10_000);
        expect(recorded.data).toMatchObject({ model: CODEX_MODEL, ...tokens, cost_cents: costOf(CODEX_MODEL, tokens).cost_cents, priced: true });
      }
    } finally {
      ws.close();
    }
  });
});

describe('usage of a model without a price', () => {
  it('is recorded with its tokens, cost 0 and priced: false, never a guessed cost', async () => {
    const { task } = await makeTask(w.api, { agent: 'codex-unpriced' });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: stubPrompt({ say: 'hi' }, 'unpriced') });
    const recorded = await eventually(async () => usage.find((u) => u.session_id === session.id), 60_000);
    expect(recorded.data).toMatchObject({ model: UNPRICED_MODEL, tokens_in: 1200, tokens_cached_in: 200, tokens_out: 40, cost_cents: 0, priced: false });
  });
});
