import { readdirSync, readFileSync } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { readAgentEvents, waitForAgentEvent } from '../../src/agents/events.js';
import { eventually } from '../../src/clients.js';
import { startEchoMcpServer, type EchoMcpServer } from '../../src/agents/mcp-echo-server.js';
import { spawnAgent, type SpawnedAgent } from './helpers.js';

interface AcpHarness {
  agent: SpawnedAgent;
  connection: acp.ClientConnection;
  updates: acp.SessionUpdate[];
  permissions: acp.RequestPermissionRequest[];
  text(): string;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function connect(
  env: Record<string, string> = {},
  answerPermission: acp.RequestPermissionResponse = { outcome: { outcome: 'selected', optionId: 'allow' } },
): AcpHarness {
  const agent = spawnAgent('scripted-acp', env);
  cleanups.push(() => agent.kill());
  const updates: acp.SessionUpdate[] = [];
  const permissions: acp.RequestPermissionRequest[] = [];
  const connection = acp
    .client({ name: 'test-client' })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      updates.push(params.update);
    })
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      permissions.push(params);
      return answerPermission;
    })
    .connect(
      acp.ndJsonStream(Writable.toWeb(agent.child.stdin) as WritableStream<Uint8Array>, Readable.toWeb(agent.child.stdout) as ReadableStream<Uint8Array>),
    );
  cleanups.push(async () => connection.close());
  const text = () => updates.flatMap((u) => (u.sessionUpdate === 'agent_message_chunk' && u.content.type === 'text' ? [u.content.text] : [])).join('\n');
  return { agent, connection, updates, permissions, text };
}

async function newSession(h: AcpHarness, mcpServers: acp.McpServer[] = []): Promise<string> {
  await h.connection.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
  const session = await h.connection.agent.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers });
  return session.sessionId;
}

const prompt = (h: AcpHarness, sessionId: string, text: string) =>
  h.connection.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text }] });

describe('scripted-acp', () => {
  it('echoes a prompt that is not JSON and ends the turn', async () => {
    const h = connect();
    const sessionId = await newSession(h);
    const response = await prompt(h, sessionId, 'hello there');
    expect(response.stopReason).toBe('end_turn');
    expect(h.text()).toBe('hello there');
    const events = readAgentEvents(h.agent.eventsFile);
    expect(events.map((e) => e.method).filter(Boolean)).toEqual(['initialize', 'session/new', 'session/prompt']);
    expect(events.find((e) => e.kind === 'prompt')?.text).toBe('hello there');
  }, 20_000);

  it('ends a sleeping turn at once with cancelled on session/cancel', async () => {
    const h = connect();
    const sessionId = await newSession(h);
    const turn = prompt(h, sessionId, JSON.stringify({ script: [{ say: 'working' }, { sleep_ms: 10_000 }] }));
    await waitForAgentEvent(h.agent.eventsFile, (e) => e.kind === 'say');
    const started = performance.now();
    await h.connection.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    expect((await turn).stopReason).toBe('cancelled');
    // Well before the 10 s sleep would end; not tighter, for a starved test lane (this one runs niced).
    expect(performance.now() - started).toBeLessThan(8_000);
    const cancel = await waitForAgentEvent(h.agent.eventsFile, (e) => e.kind === 'recv' && e.method === 'session/cancel');
    expect(cancel.t).toBeGreaterThan(0);
    // The session takes a new prompt afterwards.
    expect((await prompt(h, sessionId, 'again')).stopReason).toBe('end_turn');
  }, 20_000);

  it('keeps a core busy in a subprocess on busy_ms, which a cancel kills at once', async () => {
    const h = connect();
    const sessionId = await newSession(h);
    const turn = prompt(h, sessionId, JSON.stringify({ script: [{ say: 'building' }, { busy_ms: 60_000 }] }));
    await waitForAgentEvent(h.agent.eventsFile, (e) => e.kind === 'say');
    const busyChild = () =>
      readdirSync('/proc')
        .filter((n) => /^\d+$/.test(n))
        .find((n) => {
          try {
            const stat = readFileSync(`/proc/${n}/stat`, 'utf8').split(') ')[1]!.split(' ');
            return Number(stat[1]) === h.agent.child.pid && readFileSync(`/proc/${n}/cmdline`, 'utf8').includes('while (Date.now() < end)');
          } catch {
            return false;
          }
        });
    const pid = await eventually(async () => busyChild());
    await eventually(async () => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[11]) > 0); // utime: it runs
    await h.connection.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    expect((await turn).stopReason).toBe('cancelled');
    await eventually(async () => busyChild() === undefined);
  }, 20_000);

  it('reports usage as a usage_update with the exact numbers in _meta.kandev', async () => {
    const h = connect();
    const sessionId = await newSession(h);
    const usage = { cost_cents: 12.5, tokens_in: 100, tokens_cached_in: 40, tokens_out: 20 };
    await prompt(h, sessionId, JSON.stringify({ script: [{ usage }, { usage }] }));
    const reports = h.updates.flatMap((u) => (u.sessionUpdate === 'usage_update' ? [u] : []));
    expect(reports).toHaveLength(2);
    expect(reports[0]?._meta).toEqual({ kandev: usage });
    expect(reports[1]?.cost).toEqual({ amount: 0.25, currency: 'USD' });
  }, 20_000);

  it('asks for permission and says the outcome', async () => {
    const h = connect();
    const sessionId = await newSession(h);
    const response = await prompt(h, sessionId, JSON.stringify({ script: [{ permission: 'run the tests' }] }));
    expect(response.stopReason).toBe('end_turn');
    expect(h.permissions[0]?.toolCall.title).toBe('run the tests');
    expect(h.text()).toBe('permission: allow');
    const outcome = await waitForAgentEvent(h.agent.eventsFile, (e) => e.kind === 'permission_outcome');
    expect(outcome.normalized).toBe('allowed');
  }, 20_000);

  it('calls MCP tools through the server from session/new with its bearer token', async () => {
    const mcp: EchoMcpServer = await startEchoMcpServer({ requiredToken: 'tok-acp' });
    cleanups.push(() => mcp.close());
    const h = connect();
    const sessionId = await newSession(h, [{ type: 'http', name: 'kandev', url: mcp.url, headers: [{ name: 'Authorization', value: 'Bearer tok-acp' }] }]);
    const script = { script: [{ mcp: { tool: 'echo', args: { text: 'ping' } } }, { ask: [{ id: 'q1', text: 'Ship it?' }] }] };
    const response = await prompt(h, sessionId, JSON.stringify(script));
    expect(response.stopReason).toBe('end_turn');
    expect(h.text()).toBe(`echo: ping\n${JSON.stringify({ answers: [{ question_id: 'q1', answer: 'yes' }] })}`);
    expect(mcp.calls.map((c) => c.tool)).toEqual(['echo', 'ask_user_questions']);
    expect(mcp.calls.every((c) => c.authorization === 'Bearer tok-acp')).toBe(true);
    expect(mcp.calls[1]?.args).toEqual({ questions: [{ id: 'q1', text: 'Ship it?' }] });
    // The tool calls are visible to the client as ACP tool calls.
    expect(h.updates.filter((u) => u.sessionUpdate === 'tool_call')).toHaveLength(2);
    const start = readAgentEvents(h.agent.eventsFile).find((e) => e.kind === 'start');
    expect(start?.mcp_token).toBe(true);
    expect(JSON.stringify(readAgentEvents(h.agent.eventsFile))).not.toContain('tok-acp');
  }, 20_000);

  it('falls back to KANDEV_MCP_URL / KANDEV_MCP_TOKEN', async () => {
    const mcp = await startEchoMcpServer({ requiredToken: 'tok-env' });
    cleanups.push(() => mcp.close());
    const h = connect({ KANDEV_MCP_URL: mcp.url, KANDEV_MCP_TOKEN: 'tok-env' });
    const sessionId = await newSession(h);
    await prompt(h, sessionId, JSON.stringify({ script: [{ mcp: { tool: 'echo', args: { text: 'env' } } }] }));
    expect(h.text()).toBe('echo: env');
    expect(mcp.calls[0]?.authorization).toBe('Bearer tok-env');
  }, 20_000);

  it('logs SIGTERM and dies by it; ignore_sigterm keeps it alive', async () => {
    const h = connect();
    const sessionId = await newSession(h);
    await prompt(h, sessionId, JSON.stringify({ script: [], ignore_sigterm: true }));
    h.agent.child.kill('SIGTERM');
    await waitForAgentEvent(h.agent.eventsFile, (e) => e.kind === 'sigterm_ignored');
    expect(h.agent.child.exitCode).toBeNull();

    const plain = connect();
    await newSession(plain);
    plain.agent.child.kill('SIGTERM');
    expect(await plain.agent.exited).toEqual({ code: null, signal: 'SIGTERM' });
    expect(readAgentEvents(plain.agent.eventsFile).some((e) => e.kind === 'sigterm')).toBe(true);
  }, 20_000);
});
