import { randomUUID } from 'node:crypto';
import { Agent, request as httpRequest } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Orch, type Endpoint } from '@kandev/contracts';
import { connectNats, createLogger, on, serveEndpoints, type NatsConnection, type RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { BODY_LIMIT_BYTES, OVERSIZE_BODY_DRAIN_BYTES } from '../src/domain/http-errors.js';
import { fixtures, operatorToken, startGateway, WsTestClient } from './helpers.js';

/**
 * Issue 10 at the gateway: oversized bodies and headers, and text no database can store, are
 * refused at the edge in the error shape; nothing reaches the orchestrator.
 */
const WS1 = randomUUID();
const TASK = randomUUID();
const SESSION = randomUUID();
let nats: TestNats;
let nc: NatsConnection;
let gw: { running: RunningService; http: string; ws: string };
let token: string;
const calls: string[] = [];

function fake<E extends Endpoint>(endpoint: E, result: (req: any) => unknown) {
  return on(endpoint, async (req: any) => {
    calls.push(endpoint.name);
    return result(req) as never;
  });
}

beforeAll(async () => {
  nats = await startNats();
  gw = await startGateway(nats.url);
  nc = await connectNats({ url: nats.url, name: 'gateway-edge-test' });
  token = await operatorToken(['*']);
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake-orch', queue: 'orchestrator', log: createLogger('fake', 'silent') }, [
    fake(Orch.workspaceCreate, (req) => fixtures.workspace(WS1, req.name)),
    fake(Orch.taskCreate, (req) => ({ ...fixtures.task(TASK, WS1), title: req.title })),
    fake(Orch.taskUpdate, () => fixtures.task(TASK, WS1)),
    fake(Orch.sessionStart, () => fixtures.session(SESSION, TASK)),
    fake(Orch.sessionPrompt, () => ({ turn_id: randomUUID() })),
    fake(Orch.agentCancel, (req) => ({ success: true, session_id: req.session_id })),
    fake(Orch.taskStop, (req) => ({ task_id: req.task_id, status: 'stopped', executions: [] })),
  ]);
});
afterAll(async () => {
  await gw?.running.stop();
  await nc?.close();
  await nats?.stop();
});
beforeEach(() => {
  calls.length = 0;
});

const post = (path: string, body: unknown, method = 'POST') =>
  fetch(`${gw.http}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

/** Every text field of the operator surface, with a route that carries it. */
const TEXT_FIELDS: Array<[string, string, string, Record<string, unknown>]> = [
  ['workspace name', 'POST', '/workspaces', { name: 'X' }],
  ['task title', 'POST', '/tasks', { workspace_id: WS1, title: 'X' }],
  ['task description', 'POST', '/tasks', { workspace_id: WS1, title: 't', description: 'X' }],
  ['task agent', 'POST', '/tasks', { workspace_id: WS1, title: 't', agent: 'X' }],
  ['task idempotency_key', 'POST', '/tasks', { workspace_id: WS1, title: 't', idempotency_key: 'X' }],
  ['PATCH title', 'PATCH', `/tasks/${TASK}`, { title: 'X' }],
  ['session prompt', 'POST', `/tasks/${TASK}/sessions`, { prompt: 'X' }],
  ['session agent', 'POST', `/tasks/${TASK}/sessions`, { agent: 'X' }],
  ['turn prompt', 'POST', `/sessions/${SESSION}/prompt`, { prompt: 'X' }],
  ['cancel reason', 'POST', `/sessions/${SESSION}/cancel`, { reason: 'X' }],
  ['stop reason', 'POST', `/tasks/${TASK}/stop`, { reason: 'X' }],
];
const fill = (body: Record<string, unknown>, value: string) => Object.fromEntries(Object.entries(body).map(([k, v]) => [k, v === 'X' ? value : v]));

describe('text no database can store', () => {
  it.each(TEXT_FIELDS)('%s: NUL → 400 VALIDATION_ERROR, nothing sent on', async (_name, method, path, body) => {
    const res = await post(path, fill(body, 'a\u0000b'), method);
    expect(res.status).toBe(400);
    const err = (await res.json()) as { error: { code: string; message: string } };
    expect(err).toEqual({ error: { code: 'VALIDATION_ERROR', message: expect.any(String), details: expect.any(Object) } });
    expect(JSON.stringify(err)).toMatch(/NUL/);
    expect(calls).toEqual([]);
  });

  it.each(TEXT_FIELDS)('%s: lone surrogate → 400 VALIDATION_ERROR, nothing sent on', async (_name, method, path, body) => {
    // JSON.stringify writes a lone surrogate as the escape \ud800, which JSON.parse turns back into one.
    const res = await post(path, fill(body, 'x\ud800y'), method);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('VALIDATION_ERROR');
    expect(calls).toEqual([]);
  });

  it.each(TEXT_FIELDS)('%s: beyond its limit → 400 VALIDATION_ERROR, nothing sent on', async (_name, method, path, body) => {
    const res = await post(path, fill(body, 'a'.repeat(100_001)), method);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('VALIDATION_ERROR');
    expect(calls).toEqual([]);
  });

  it('accepts the same fields with ordinary text, including astral characters (the test can fail)', async () => {
    for (const [, method, path, body] of TEXT_FIELDS) {
      const res = await post(path, fill(body, 'ok 😀 é'), method);
      expect(res.status).toBeLessThan(300);
    }
    expect(calls.length).toBe(TEXT_FIELDS.length);
  });

  it('the /ws actions refuse a NUL reason in the same way', async () => {
    const ws = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    try {
      for (const [action, payload] of [
        ['task.stop', { task_id: TASK, reason: 'a\u0000b' }],
        ['agent.cancel', { session_id: SESSION, reason: 'a\u0000b' }],
      ] as const) {
        const reply = await ws.call(action, payload);
        expect(reply).toMatchObject({ type: 'error', action, payload: { code: 'VALIDATION_ERROR' } });
      }
    } finally {
      await ws.close();
    }
    expect(calls).toEqual([]);
  });
});

describe('oversized input', () => {
  it('a body beyond the limit → 400 BAD_REQUEST in the SPEC shape (not an UNAVAILABLE outage)', async () => {
    const res = await post(`/tasks/${TASK}/sessions`, { prompt: 'a'.repeat(1024 * 1024) });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: { code: 'BAD_REQUEST', message: 'request body is too large', details: { limit_bytes: BODY_LIMIT_BYTES } } });
    expect(calls).toEqual([]);
  });

  /** A POST over `agent` declaring `length` bytes and sending `body` (which may be shorter: only the headers, then the answer). */
  const rawPost = (agent: Agent, path: string, length: number, body: string) =>
    new Promise<{ status: number; connection: string | undefined; reused: boolean; json: unknown }>((resolve, reject) => {
      const url = new URL(`${gw.http}${path}`);
      const req = httpRequest(
        {
          agent,
          method: 'POST',
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': String(length) },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, reused: req.reusedSocket, json: JSON.parse(text) }));
        },
      );
      req.on('error', reject);
      if (Buffer.byteLength(body) === length) req.end(body);
      else req.flushHeaders();
    });

  it('a body refused by its declared length is read to its end: the caller gets its 400 and the connection serves the next request', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const body = JSON.stringify({ prompt: 'a'.repeat(1024 * 1024) });
      const refused = await rawPost(agent, `/tasks/${TASK}/sessions`, Buffer.byteLength(body), body);
      expect(refused).toMatchObject({ status: 400, json: { error: { code: 'BAD_REQUEST', message: 'request body is too large' } } });
      expect(refused.connection).not.toBe('close');
      const next = await rawPost(agent, '/workspaces', Buffer.byteLength('{"name":"next one"}'), '{"name":"next one"}');
      expect(next).toMatchObject({ status: 201, reused: true });
    } finally {
      agent.destroy();
    }
  });

  it('a body declared beyond the drain bound is refused at once and its connection closed', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const refused = await rawPost(agent, `/tasks/${TASK}/sessions`, OVERSIZE_BODY_DRAIN_BYTES + 1, '');
      expect(refused).toMatchObject({ status: 400, connection: 'close', json: { error: { code: 'BAD_REQUEST', message: 'request body is too large' } } });
    } finally {
      agent.destroy();
    }
    expect(calls).toEqual([]);
  });

  it('the body limit is below the NATS max payload, with room for the actor and headers', () => {
    const maxPayload = nc.info!.max_payload;
    expect(BODY_LIMIT_BYTES).toBeLessThanOrEqual(maxPayload - 64 * 1024);
  });

  it('the largest valid prompt (100,000 three-byte characters) still goes through', async () => {
    const res = await post(`/tasks/${TASK}/sessions`, { prompt: 'é€'.repeat(50_000) });
    expect(res.status).toBe(201);
    expect(calls).toEqual(['orch.session.start']);
  });

  it('a body nested 100,000 levels deep → 4xx in the SPEC shape, and the gateway keeps serving', async () => {
    for (const body of ['['.repeat(100_000) + ']'.repeat(100_000), `{"title":${'{"a":'.repeat(50_000)}1${'}'.repeat(50_000)}}`]) {
      const res = await post('/tasks', body);
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
      expect(((await res.json()) as { error: { code: string } }).error.code).toMatch(/^(BAD_REQUEST|VALIDATION_ERROR)$/);
    }
    expect(calls).toEqual([]);
    expect((await post('/workspaces', { name: 'still up' })).status).toBe(201);
  });

  it('a 20 KB header → 400 with the SPEC body, not the framework own', async () => {
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const url = new URL(`${gw.http}/tasks/${TASK}`);
      const req = httpRequest(
        { host: url.hostname, port: url.port, path: url.pathname, headers: { authorization: `Bearer ${token}`, 'x-padding': 'a'.repeat(20 * 1024) } },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(400);
    expect(JSON.parse(body)).toEqual({ error: { code: 'BAD_REQUEST', message: 'request headers are too large', details: { limit_bytes: 16 * 1024 } } });
    expect(calls).toEqual([]);
  });
});
