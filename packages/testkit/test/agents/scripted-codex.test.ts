import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { readAgentEvents, waitForAgentEvent } from '../../src/agents/events.js';
import { JsonLinePeer } from '../../src/agents/jsonl-peer.js';
import { startEchoMcpServer } from '../../src/agents/mcp-echo-server.js';
import { spawnAgent, type SpawnedAgent } from './helpers.js';

interface Notification {
  method: string;
  params: Record<string, unknown>;
}

const TurnCompleted = z.object({
  threadId: z.string(),
  turn: z.object({ id: z.string(), status: z.string(), error: z.object({ message: z.string() }).nullable() }),
});
type TurnCompleted = z.infer<typeof TurnCompleted>;

interface CodexHarness {
  agent: SpawnedAgent;
  peer: JsonLinePeer;
  notifications: Notification[];
  approvals: Array<Record<string, unknown>>;
  /** Resolves with the params of the next turn/completed. */
  nextCompletion(): Promise<TurnCompleted>;
  text(): string;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function connect(env: Record<string, string> = {}, decision = 'accept'): CodexHarness {
  const agent = spawnAgent('scripted-codex', env);
  cleanups.push(() => agent.kill());
  const notifications: Notification[] = [];
  const approvals: Array<Record<string, unknown>> = [];
  const waiters: Array<(params: Record<string, unknown>) => void> = [];
  const peer = new JsonLinePeer(agent.child.stdout, agent.child.stdin)
    .onNotification((method, params) => {
      const p = isRecord(params) ? params : {};
      notifications.push({ method, params: p });
      if (method === 'turn/completed') waiters.shift()?.(p);
    })
    .onRequest(async (method, params) => {
      if (method !== 'item/commandExecution/requestApproval') throw new Error(`unexpected ${method}`);
      approvals.push(isRecord(params) ? params : {});
      return { decision };
    });
  return {
    agent,
    peer,
    notifications,
    approvals,
    nextCompletion: () => new Promise((resolve) => waiters.push((p) => resolve(TurnCompleted.parse(p)))),
    text: () =>
      notifications
        .filter((n) => n.method === 'item/agentMessage/delta')
        .map((n) => String(n.params.delta))
        .join('\n'),
  };
}

async function startThread(h: CodexHarness, config?: Record<string, unknown>): Promise<string> {
  expect(await h.peer.request('initialize', { clientInfo: { name: 'test', version: '0' } })).toEqual({ userAgent: 'scripted-codex/0.1.0' });
  h.peer.notify('initialized', undefined);
  const result = await h.peer.request('thread/start', { cwd: process.cwd(), ...(config ? { config } : {}) });
  if (!isRecord(result) || !isRecord(result.thread) || typeof result.thread.id !== 'string') throw new Error('bad thread/start result');
  return result.thread.id;
}

async function startTurn(h: CodexHarness, threadId: string, text: string): Promise<string> {
  const result = await h.peer.request('turn/start', { threadId, input: [{ type: 'text', text }] });
  if (!isRecord(result) || !isRecord(result.turn) || typeof result.turn.id !== 'string') throw new Error('bad turn/start result');
  expect(result.turn.status).toBe('inProgress');
  return result.turn.id;
}

describe('scripted-codex', () => {
  it('rejects requests before initialize', async () => {
    const h = connect();
    await expect(h.peer.request('thread/start', {})).rejects.toThrow('not initialized');
  }, 20_000);

  it('echoes a prompt and completes the turn', async () => {
    const h = connect();
    const threadId = await startThread(h);
    const done = h.nextCompletion();
    const turnId = await startTurn(h, threadId, 'hello codex');
    const completed = await done;
    expect(completed).toMatchObject({ threadId, turn: { id: turnId, status: 'completed' } });
    expect(h.text()).toBe('hello codex');
    expect(h.notifications.map((n) => n.method)).toContain('turn/started');
  }, 20_000);

  it('interrupts a sleeping turn at once', async () => {
    const h = connect();
    const threadId = await startThread(h);
    const done = h.nextCompletion();
    const turnId = await startTurn(h, threadId, JSON.stringify({ script: [{ sleep_ms: 10_000 }] }));
    const started = performance.now();
    expect(await h.peer.request('turn/interrupt', { threadId, turnId })).toEqual({});
    expect((await done).turn.status).toBe('interrupted');
    // Well before the 10 s sleep would end; not tighter, for a starved test lane (this one runs niced).
    expect(performance.now() - started).toBeLessThan(8_000);
    await expect(h.peer.request('turn/interrupt', { threadId, turnId })).rejects.toThrow(/no turn/);
  }, 20_000);

  it('keeps running when the script ignores cancels', async () => {
    const h = connect();
    const threadId = await startThread(h);
    const done = h.nextCompletion();
    const turnId = await startTurn(h, threadId, JSON.stringify({ script: [{ sleep_ms: 300 }], ignore_cancel: true }));
    await h.peer.request('turn/interrupt', { threadId, turnId });
    expect((await done).turn.status).toBe('completed');
    expect(readAgentEvents(h.agent.eventsFile).some((e) => e.kind === 'cancel_ignored')).toBe(true);
  }, 20_000);

  it('reports usage as thread/tokenUsage/updated with cost_cents in _meta.kandev', async () => {
    const h = connect();
    const threadId = await startThread(h);
    const done = h.nextCompletion();
    const usage = { cost_cents: 3, tokens_in: 30, tokens_cached_in: 10, tokens_out: 7 };
    await startTurn(h, threadId, JSON.stringify({ script: [{ usage }] }));
    await done;
    const report = h.notifications.find((n) => n.method === 'thread/tokenUsage/updated');
    expect(report?.params).toMatchObject({
      threadId,
      tokenUsage: { last: { inputTokens: 30, cachedInputTokens: 10, outputTokens: 7 } },
      _meta: { kandev: usage },
    });
  }, 20_000);

  it('asks for approval and fails a turn on a fail step', async () => {
    const h = connect({}, 'decline');
    const threadId = await startThread(h);
    let done = h.nextCompletion();
    await startTurn(h, threadId, JSON.stringify({ script: [{ permission: 'rm -rf build' }] }));
    expect((await done).turn.status).toBe('completed');
    expect(h.approvals[0]).toMatchObject({ threadId, command: 'rm -rf build' });
    expect(h.text()).toBe('permission: decline');
    done = h.nextCompletion();
    await startTurn(h, threadId, JSON.stringify({ script: [{ fail: 'boom' }] }));
    expect((await done).turn).toMatchObject({ status: 'failed', error: { message: 'boom' } });
  }, 20_000);

  it('refuses a bearer_token in mcp_servers, as Codex 0.169 does', async () => {
    const h = connect();
    await expect(startThread(h, { mcp_servers: { kandev: { url: 'http://127.0.0.1:9/mcp', bearer_token: 'tok' } } })).rejects.toThrow(
      /bearer_token is not supported/,
    );
  }, 20_000);

  it('calls MCP tools through config.mcp_servers.kandev with its Authorization header', async () => {
    const mcp = await startEchoMcpServer({ requiredToken: 'tok-codex' });
    cleanups.push(() => mcp.close());
    const h = connect();
    const threadId = await startThread(h, { mcp_servers: { kandev: { url: mcp.url, http_headers: { Authorization: 'Bearer tok-codex' } } } });
    const done = h.nextCompletion();
    await startTurn(h, threadId, JSON.stringify({ script: [{ mcp: { tool: 'echo', args: { text: 'pong' } } }, { ask: [{ text: 'Merge?' }] }] }));
    expect((await done).turn.status).toBe('completed');
    expect(h.text()).toBe(`echo: pong\n${JSON.stringify({ answers: [{ question_id: 'q1', answer: 'yes' }] })}`);
    expect(mcp.calls.map((c) => [c.tool, c.authorization])).toEqual([
      ['echo', 'Bearer tok-codex'],
      ['ask_user_questions', 'Bearer tok-codex'],
    ]);
    await waitForAgentEvent(h.agent.eventsFile, (e) => e.kind === 'mcp_result' && e.tool === 'ask_user_questions');
  }, 20_000);

  it('fails the turn when a tool is called without an MCP server', async () => {
    const h = connect();
    const threadId = await startThread(h);
    const done = h.nextCompletion();
    await startTurn(h, threadId, JSON.stringify({ script: [{ mcp: { tool: 'echo', args: {} } }] }));
    expect((await done).turn).toMatchObject({ status: 'failed', error: { message: 'no MCP server configured for tool echo' } });
  }, 20_000);
});
