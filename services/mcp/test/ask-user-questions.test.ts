import { OrchMcpClarification, conflict, type ClarificationBundleView, type ClarificationWait } from '@kandev/contracts';
import { createLogger, ensureEventStream, EventPublisher, on, serveEndpoints, startService } from '@kandev/runtime';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mcpService } from '../src/service.js';
import { agentToken, connectClient, Harness, SECRET, uuid } from './harness.js';

/**
 * The waiting side of ask_user_questions against an orchestrator faked at the subject level: the
 * fake holds one bundle whose state a test changes, as a responder on another replica would.
 */
class FakeBundles {
  view: ClarificationBundleView | null = null;
  expiresInMs = 30_000;
  renewEveryMs = 5_000;
  renewals = 0;
  expiries = 0;
  releases = 0;
  asked: Array<Record<string, unknown>> = [];
  askError: Error | null = null;

  wait(): ClarificationWait {
    return { bundle: this.view!, expires_in_ms: this.view!.status === 'pending' ? this.expiresInMs : 0, renew_every_ms: this.renewEveryMs };
  }
  close(
    status: ClarificationBundleView['status'],
    questionStatus: 'answered' | 'rejected' | 'cancelled' | 'expired',
    extra: Partial<ClarificationBundleView> = {},
  ) {
    const v = this.view!;
    this.view = {
      ...v,
      status,
      closed_at: new Date().toISOString(),
      waiter_live: false,
      active: false,
      agent_resumed: true,
      questions: v.questions.map((q) =>
        q.status === 'pending' ? { ...q, status: questionStatus, answer: questionStatus === 'answered' ? `answer to ${q.id}` : null } : q,
      ),
      ...extra,
    };
  }
}

let h: Harness;
const fake = new FakeBundles();
const clients: Client[] = [];

beforeAll(async () => {
  h = await Harness.start();
  // The mcp service creates no stream (it uses no JetStream API); this test publishes close events itself.
  await ensureEventStream(h.nc);
  await serveEndpoints(h.nc, { service: 'orchestrator', instanceId: 'fake-clar', queue: 'orchestrator', log: createLogger('fake', 'silent') }, [
    on(OrchMcpClarification.ask, async (req) => {
      fake.asked.push(req);
      if (fake.askError) throw fake.askError;
      const now = new Date().toISOString();
      fake.view = {
        id: uuid(),
        task_id: req.caller_task_id,
        workspace_id: uuid(),
        session_id: req.caller_session_id ?? uuid(),
        turn_id: uuid(),
        status: 'pending',
        questions: req.questions.map((q, i) => ({
          id: q.id ?? `q${i + 1}`,
          text: q.text,
          options: q.options ?? null,
          status: 'pending' as const,
          answer: null,
        })),
        created_at: now,
        expires_at: now,
        closed_at: null,
        reason: null,
        waiter_live: true,
        detached: false,
        detached_reason: null,
        superseded: false,
        active: true,
        agent_resumed: null,
      };
      return fake.wait();
    }),
    on(OrchMcpClarification.renew, async () => {
      fake.renewals++;
      return fake.wait();
    }),
    on(OrchMcpClarification.release, async () => {
      fake.releases++;
      if (fake.view!.status === 'pending') fake.view = { ...fake.view!, waiter_live: false, detached: true, detached_reason: 'caller_gone', active: false };
      return fake.wait();
    }),
    on(OrchMcpClarification.expire, async () => {
      fake.expiries++;
      if (fake.view!.status === 'pending') fake.close('expired', 'expired');
      return fake.wait();
    }),
  ]);
});
afterEach(async () => {
  Object.assign(fake, { view: null, expiresInMs: 30_000, renewEveryMs: 5_000, renewals: 0, expiries: 0, releases: 0, asked: [], askError: null });
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => undefined)));
});
afterAll(async () => h?.stop());

async function agent(claims: { task_id?: string; session_id?: string } = {}) {
  const client = await connectClient(
    h.url,
    await agentToken({ task_id: claims.task_id ?? uuid(), mode: 'task', ...(claims.session_id ? { session_id: claims.session_id } : {}) }),
  );
  clients.push(client);
  return client;
}
const askCall = (
  client: Client,
  questions: unknown[] = [
    { id: 'a', text: 'A?' },
    { text: 'B?', options: ['x', 'y'] },
  ],
  signal?: AbortSignal,
) =>
  client.callTool({ name: 'ask_user_questions', arguments: { questions } }, undefined, signal ? { signal } : undefined) as Promise<{
    isError?: boolean;
    content: Array<{ type: string; text?: string }>;
    structuredContent?: Record<string, unknown>;
  }>;
async function until(what: string, pred: () => boolean, ms = 5_000) {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
const publishClosed = () =>
  new EventPublisher(h.nc).emit(
    'clarification.closed',
    { workspace_id: fake.view!.workspace_id, task_id: fake.view!.task_id, session_id: fake.view!.session_id },
    { bundle: fake.view! },
  );

describe('ask_user_questions', () => {
  it("asks for the token's task and session, then returns the answers as soon as the close event arrives", async () => {
    const task = uuid();
    const session = uuid();
    const client = await agent({ task_id: task, session_id: session });
    fake.renewEveryMs = 60_000; // only the event can end this wait in time
    const pending = askCall(client);
    await until('the bundle', () => fake.view !== null);
    expect(fake.asked[0]).toEqual({
      caller_task_id: task,
      agent_token: expect.stringMatching(/^eyJ/),
      caller_session_id: session,
      questions: [
        { id: 'a', text: 'A?' },
        { text: 'B?', options: ['x', 'y'] },
      ],
    });
    fake.close('answered', 'answered');
    await publishClosed();
    const r = await pending;
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({
      bundle_id: fake.view!.id,
      status: 'answered',
      answers: [
        { question_id: 'a', answer: 'answer to a' },
        { question_id: 'q2', answer: 'answer to q2' },
      ],
    });
    expect(JSON.parse(r.content[0]!.text!)).toEqual(r.structuredContent);
  });

  it('returns the typed rejection through its periodic re-check when the close event is missed', async () => {
    const client = await agent();
    fake.renewEveryMs = 100;
    const pending = askCall(client);
    await until('the bundle', () => fake.view !== null);
    fake.close('rejected', 'rejected', { reason: 'not now' });
    const r = await pending; // no event published
    expect(r.structuredContent).toMatchObject({ rejected: true, status: 'rejected', reason: 'not now', answers: [] });
    expect(fake.renewals).toBeGreaterThan(0);
  });

  it('renews the lease while it waits', async () => {
    const client = await agent();
    fake.renewEveryMs = 50;
    const pending = askCall(client);
    await until('three renewals', () => fake.renewals >= 3);
    fake.close('cancelled', 'cancelled');
    await publishClosed();
    expect((await pending).structuredContent).toMatchObject({ cancelled: true, status: 'cancelled' });
  });

  it('expires at the deadline the orchestrator gave', async () => {
    const client = await agent();
    fake.expiresInMs = 300;
    fake.renewEveryMs = 100;
    const r = await askCall(client);
    expect(fake.expiries).toBe(1);
    expect(r.structuredContent).toMatchObject({ expired: true, status: 'expired' });
  });

  it('stops waiting once the bundle is detached, and never hands over what an operator did after that', async () => {
    const client = await agent();
    fake.renewEveryMs = 50;
    const pending = askCall(client);
    await until('the bundle', () => fake.view !== null);
    fake.close('rejected', 'rejected', { detached: true, detached_reason: 'turn_cancelled', agent_resumed: false });
    await publishClosed();
    const r = await pending;
    expect(r.structuredContent).toMatchObject({ detached: true, status: 'detached', reason: 'turn_cancelled' });
    expect(r.structuredContent).not.toHaveProperty('rejected');
  });

  it('detaches the bundle at once when the client cancels the call (notifications/cancelled)', async () => {
    const client = await agent();
    fake.renewEveryMs = 60_000; // only the cancel can end this wait in time
    const abort = new AbortController();
    const pending = askCall(client, undefined, abort.signal);
    await until('the bundle', () => fake.view !== null);
    abort.abort();
    await expect(pending).rejects.toThrow();
    await until('the release', () => fake.releases === 1);
    expect(fake.view).toMatchObject({ detached: true, detached_reason: 'caller_gone' });
  });

  it('a notifications/cancelled that lands on another mcp replica reaches the call and detaches the bundle (ADR 0037)', async () => {
    const other = await startService(mcpService, {
      ...process.env,
      NATS_URL: h.nats.url,
      MCP_PORT: '0',
      LOG_LEVEL: 'silent',
      KANDEV_JWT_SECRET: SECRET,
      INSTANCE_ID: 'mcp-other',
    });
    try {
      const token = await agentToken({ task_id: uuid(), mode: 'task' });
      fake.renewEveryMs = 60_000; // only the cancel can end this wait in time
      const post = (url: string, token: string, body: unknown) =>
        fetch(url, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify(body),
        });
      const pending = post(h.url, token, {
        jsonrpc: '2.0',
        id: 41,
        method: 'tools/call',
        params: { name: 'ask_user_questions', arguments: { questions: [{ id: 'a', text: 'A?' }] } },
      });
      await until('the bundle', () => fake.view !== null);
      const cancel = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 41, reason: 'the agent gave up' } };
      // Another agent's token naming the same id cancels nothing: the cancel is keyed by the caller.
      expect((await post(other.urls.mcp!, await agentToken({ task_id: uuid(), mode: 'task' }), cancel)).status).toBe(202);
      await new Promise((r) => setTimeout(r, 200));
      expect(fake.releases).toBe(0);
      expect((await post(other.urls.mcp!, token, cancel)).status).toBe(202);
      const res = await pending;
      expect(res.status).toBe(200);
      expect(((await res.json()) as { result: { structuredContent: unknown } }).result.structuredContent).toMatchObject({
        status: 'detached',
        detached: true,
        reason: 'caller_gone',
      });
      expect(fake.releases).toBe(1);
    } finally {
      await other.stop();
    }
  });

  it("detaches the bundle at once when the client's connection closes mid-wait", async () => {
    const token = await agentToken({ task_id: uuid(), mode: 'task' });
    fake.renewEveryMs = 60_000;
    const http = await import('node:http');
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'ask_user_questions', arguments: { questions: [{ id: 'a', text: 'A?' }] } },
    });
    const req = http.request(h.url, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    });
    req.on('error', () => undefined); // destroyed below on purpose
    req.end(body);
    await until('the bundle', () => fake.view !== null);
    req.destroy();
    await until('the release', () => fake.releases === 1);
    expect(fake.view).toMatchObject({ detached: true, detached_reason: 'caller_gone' });
  });

  it('reports a refused ask as a tool error', async () => {
    const client = await agent();
    fake.askError = conflict('no agent turn in flight to attach the questions to');
    const r = await askCall(client);
    expect(r.isError).toBe(true);
    expect(r.content[0]!.text).toBe('backend error [CONFLICT]: no agent turn in flight to attach the questions to');
  });

  it('validates the questions before asking', async () => {
    const client = await agent();
    const r = await askCall(client, []);
    expect(r.isError).toBe(true);
    expect(r.structuredContent).toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(fake.asked).toEqual([]);
  });
});
