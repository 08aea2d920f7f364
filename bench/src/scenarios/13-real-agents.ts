import { hasEnded, readProcStat } from '@kandev/runtime/host';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually, findRealAgents, preciseEpoch, REAL_AGENTS, startModelStub, stubPrompt, writeRealAgentCatalogue, WsClient } from '@kandev/testkit';
import type { Scenario, ScenarioResult } from '../scenario.js';
import { e2eIterations, startBenchStack, summarize, type BenchStack } from '../e2e.js';

/**
 * The published agents (Codex CLI; Claude Code and Gemini CLI over ACP; pinned by agents-e2e) against the local
 * model stub, beside the scripted agents in the same run:
 * - cancel: `agent.cancel` sent on /ws → the stub sees the agent close its model stream;
 * - stop: `POST /tasks/:id/stop` sent → the agent process is gone (reaped, not a zombie).
 * Skipped (with a note) where the agents are not installed, e.g. in the production image.
 */

/** Running and not a zombie. */
function running(pid: number): boolean {
  const st = readProcStat(pid);
  return st !== undefined && !hasEnded(st.state);
}

/** A fresh task's session with its agent up and idle (real agents take seconds to start). */
async function readySession(b: BenchStack, workspace_id: string, agent: string) {
  const task = await b.api.ok('POST', '/tasks', { workspace_id, title: 'bench', agent });
  const session = await b.api.ok('POST', `/tasks/${task.id}/sessions`, {});
  const detail = await eventually(
    async () => {
      const s = (await b.api.get(`/sessions/${session.id}`)).body;
      return s.execution?.status === 'READY' ? s : null;
    },
    60_000,
    20,
  );
  return { task, session, pid: detail.execution.pid as number };
}

const tight = async <T>(fn: () => T | undefined | false, timeoutMs: number): Promise<T> => {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 0.5));
  }
};

const scenario: Scenario = {
  name: 'published agents: cancel to model stream closed, stop to process gone',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const bins = findRealAgents();
    if (!bins) {
      ctx.log('the published agents are not installed (`node agents-e2e/install.mjs` installs them); skipped');
      return [];
    }
    const stub = await startModelStub();
    ctx.defer(() => stub.stop());
    const dir = mkdtempSync(join(tmpdir(), 'kandev-bench-agents-'));
    ctx.defer(() => rmSync(dir, { recursive: true, force: true }));
    const b = await startBenchStack({
      KANDEV_AGENT_CATALOGUE: writeRealAgentCatalogue(bins, stub.url, dir),
      LAUNCH_TIMEOUT_MS: '60000',
      TEARDOWN_GRACE_MS: '2000',
      // The model stub is on loopback, where agents reach only what is allowed (ADR 0057).
      AGENT_LOOPBACK_PORTS: new URL(stub.url).port,
    });
    ctx.defer(() => b.stop());
    const ws = await WsClient.connect(b.stack.wsUrl, b.token);
    ctx.defer(() => ws.close());
    const workspace = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;
    const results: ScenarioResult[] = [];

    const cancelIterations = e2eIterations(20);
    for (const agent of REAL_AGENTS) {
      const s = await readySession(b, workspace, agent);
      const toStreamClosed: number[] = [];
      const roundTrip: number[] = [];
      for (let i = 0; i < cancelIterations + 2; i++) {
        const marker = `bench-cancel-${agent}-${i}-${Date.now()}`;
        const r = await b.api.post(`/sessions/${s.session.id}/prompt`, { prompt: stubPrompt({ slow: { ms: 120_000, every_ms: 100 } }, marker) });
        if (r.status !== 202) throw new Error(`prompt failed: ${JSON.stringify(r.body)}`);
        const stream = await tight(() => {
          const req = stub.requests.find((q) => q.userText.includes(marker) && q.tools.length > 0);
          return req ? stub.streams.find((x) => x.request === req.index && x.endedAt === undefined) : undefined;
        }, 60_000);
        const t0 = preciseEpoch();
        const res = await ws.request('agent.cancel', { session_id: s.session.id });
        const t1 = preciseEpoch();
        if (res.type !== 'response') throw new Error(`cancel failed: ${JSON.stringify(res.payload)}`);
        await tight(() => stream.endedAt !== undefined, 30_000);
        if (!stream.closedByClient) throw new Error(`${agent}: the model stream ended without the agent closing it`);
        if (i >= 2) {
          toStreamClosed.push(stream.endedAt! - t0);
          roundTrip.push(t1 - t0);
        }
      }
      results.push(
        {
          id: `real.${agent}.cancel.to_stream_closed`,
          label: `${agent}: agent.cancel sent on /ws → the model stub sees the agent close its stream`,
          stats: summarize(toStreamClosed),
        },
        {
          id: `real.${agent}.cancel.ws_round_trip`,
          label: `${agent}: agent.cancel sent → /ws response (turn resolved cancelled)`,
          stats: summarize(roundTrip),
        },
      );
      ctx.log(`${agent}: cancel → stream closed p50 ${summarize(toStreamClosed).p50.toFixed(1)} ms`);
    }

    const stopIterations = e2eIterations(8);
    for (const agent of ['scripted-acp', 'scripted-codex', ...REAL_AGENTS]) {
      const gone: number[] = [];
      for (let i = 0; i < stopIterations + 1; i++) {
        const s = await readySession(b, workspace, agent);
        // Let the fresh agent finish starting (module loading, JIT) so the figure is the stop path's.
        await new Promise((r) => setTimeout(r, 300));
        const t0 = performance.now();
        const res = await b.api.post(`/tasks/${s.task.id}/stop`);
        if (res.status !== 200) throw new Error(`stop failed: ${JSON.stringify(res.body)}`);
        await tight(() => !running(s.pid), 30_000);
        if (i >= 1) gone.push(performance.now() - t0);
      }
      results.push({ id: `real.${agent}.stop.to_process_gone`, label: `${agent}: POST /tasks/:id/stop sent → agent process gone`, stats: summarize(gone) });
      ctx.log(`${agent}: stop → process gone p50 ${summarize(gone).p50.toFixed(1)} ms`);
    }
    return results;
  },
};
export default scenario;
