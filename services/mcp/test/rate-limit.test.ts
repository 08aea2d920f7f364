import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '@kandev/testkit';
import { agentToken, connectClient, fakeTask, Harness, uuid } from './harness.js';

/** One tools/call POST, as any MCP client sends it (stateless: no initialize needed). */
async function post(url: string, token: string, body: unknown) {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-11-25',
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await res.text() };
}
const whoami = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'whoami_kandev', arguments: {} } });

/** on MCP: KANDEV_AGENT_RATE per token, answered 429 RATE_LIMITED with Retry-After (ADR 0065). */
describe('per-token MCP rate', () => {
  let h: Harness;
  const clients: Client[] = [];
  beforeAll(async () => {
    // 2 per second on average, 10 at once: a window of 5 s holding 10 requests (long enough for every check below to fall in it).
    h = await Harness.start({ KANDEV_AGENT_RATE: '2', KANDEV_AGENT_BURST: '10' });
    h.handlers.whoami = async (req) => fakeTask({ id: req.caller_task_id });
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    await h?.stop();
  });

  it('answers a flood from one token 429 with Retry-After and RATE_LIMITED, while another token is served normally', async () => {
    const flooder = await agentToken({ task_id: uuid(), mode: 'task' });
    const other = uuid();
    const otherClient = await connectClient(h.url, await agentToken({ task_id: other, mode: 'task' }));
    clients.push(otherClient);

    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => post(h.url, flooder, whoami(i + 1))));
    const ok = answers.filter((a) => a.status === 200);
    const limited = answers.filter((a) => a.status === 429);
    expect(ok).toHaveLength(10);
    expect(limited).toHaveLength(20);
    for (const a of limited) {
      expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(a.retryAfter)).toBeLessThanOrEqual(5);
      const body = JSON.parse(a.body);
      expect(body.error.message).toMatch(/^backend error \[RATE_LIMITED\]: too many MCP requests for this agent token/);
      expect(body.error.data).toMatchObject({ code: 'RATE_LIMITED', details: { retry_after_s: Number(a.retryAfter), limit: 10, window_ms: 5000 } });
    }
    // Only the admitted ones reached the orchestrator.
    expect(h.wire.filter((w) => w.subject === 'kandev.orch.mcp.whoami' && w.body.agent_token === flooder)).toHaveLength(10);

    // Meanwhile another token is served normally, through the SDK client.
    const r = (await otherClient.callTool({ name: 'whoami_kandev', arguments: {} })) as { isError?: boolean; structuredContent?: { id?: string } };
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent?.id).toBe(other);

    // A notification (a cancel) still gets through to a limited token: it is not a request.
    const note = await post(h.url, flooder, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } });
    expect(note.status).toBe(202);

    // An SDK client of the limited token sees the code in its error.
    const limitedClient = new (await import('@modelcontextprotocol/sdk/client/index.js')).Client({ name: 't', version: '0' });
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    const err = await limitedClient
      .connect(new StreamableHTTPClientTransport(new URL(h.url), { requestInit: { headers: { authorization: `Bearer ${flooder}` } } }))
      .then(() => limitedClient.callTool({ name: 'whoami_kandev', arguments: {} }))
      .then(
        () => null,
        (e: unknown) => e as Error,
      );
    expect((err as Error & { code?: number }).code).toBe(429);
    expect(err?.message).toMatch(/backend error \[RATE_LIMITED\]/);
    await limitedClient.close().catch(() => undefined);

    // Once the window turns the token is served again.
    await eventually(async () => (await post(h.url, flooder, whoami(99))).status === 200, 10_000, 250);
  });
});

describe('rate off', () => {
  it('KANDEV_AGENT_RATE=0 admits a burst of any size', async () => {
    const h = await Harness.start({ KANDEV_AGENT_RATE: '0' });
    try {
      h.handlers.whoami = async (req) => fakeTask({ id: req.caller_task_id });
      const token = await agentToken({ task_id: uuid(), mode: 'task' });
      const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => post(h.url, token, whoami(i + 1))));
      expect(answers.every((a) => a.status === 200)).toBe(true);
    } finally {
      await h.stop();
    }
  });
});

describe('defaults', () => {
  it('KANDEV_AGENT_RATE is 20 per second with a burst of 40 (a 2 s window) per token; MCP_REPLICAS splits it', async () => {
    const { McpEnv } = await import('../src/env.js');
    const { rateWindow } = await import('@kandev/contracts');
    const env = McpEnv.parse({ KANDEV_JWT_SECRET: 'x'.repeat(20) });
    expect(env.KANDEV_AGENT_RATE).toBe(20);
    expect(env.KANDEV_AGENT_BURST).toBeUndefined(); // 2 × the rate
    expect(rateWindow({ rate: 20, burst: 40, replicas: 1 })).toEqual({ points: 40, windowMs: 2_000 });
    expect(rateWindow({ rate: 20, burst: 40, replicas: 3 })).toEqual({ points: 14, windowMs: 2_000 });
  });
});
