import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { connect as netConnect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conflict, Holds, Orch, OrchRead, unguardedStrings } from '@kandev/contracts';
import { connectNats, createLogger, on, serveEndpoints, signAgentToken, signOperatorToken, type NatsConnection, type RunningService } from '@kandev/runtime';
import { poisonedCases, startNats, validExample, type TestNats } from '@kandev/testkit';
import type { z } from 'zod';
import { MAX_JSON_DEPTH } from '../src/domain/body.js';
import { API_ROUTES } from '../src/routes/api.js';
import { MAX_SUBSCRIPTIONS_PER_SOCKET } from '../src/ws/actions.js';
import { fixtures, startGateway, WsTestClient } from './helpers.js';

/**
 * SPEC at the operator edge: the gateway holds the operator key only; every string
 * of every route body is refused with NUL or a lone surrogate before anything leaves the gateway
 * (requests generated from the contracts); bodies that are not UTF-8 are refused, not mangled;
 * the /ws subscription cap holds under a burst.
 */
const OPERATOR_KEY = 'gateway-test-operator-key-0123456789abcdef';
const AGENT_KEY = 'gateway-test-agent-key-0123456789abcdef';
const WS1 = randomUUID();

let nats: TestNats;
let nc: NatsConnection;
let gw: { running: RunningService; http: string; ws: string };
let token: string;
/** Every request that reached a fake service, by subject. */
const received: string[] = [];
/** taskGet answers wait for this (the burst test opens it once enough lookups are in flight). */
let gate: Promise<void> = Promise.resolve();
/** Task ids the fake orchestrator was asked about (a request resent after ADR 0032's receipt timeout counts once). */
const looked = new Set<string>();
/** idempotency_key of each task creation that reached the fake orchestrator. */
const idempotencyKeys: unknown[] = [];

beforeAll(async () => {
  nats = await startNats();
  // The operator key only: no KANDEV_JWT_SECRET (empty counts as unset), no agent key (ADR 0020).
  gw = await startGateway(nats.url, { KANDEV_OPERATOR_JWT_SECRET: OPERATOR_KEY, KANDEV_JWT_SECRET: '' });
  nc = await connectNats({ url: nats.url, name: 'gateway-untrusted-input-test' });
  token = await signOperatorToken(OPERATOR_KEY, { sub: 'alice', workspaces: ['*'] });
  // Whatever reaches NATS on any service subject is recorded: a refused request must leave nothing here.
  const spy = nc.subscribe('kandev.>');
  void (async () => {
    for await (const m of spy) if (!m.subject.startsWith('kandev.evt.') && !m.subject.endsWith('.ping')) received.push(m.subject);
  })();
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake-orch', queue: 'orchestrator', log: createLogger('fake', 'silent') }, [
    on(Orch.taskGet, async (req: any) => {
      looked.add(req.task_id);
      await gate;
      return { ...fixtures.task(req.task_id, WS1), sessions: [], hold: null } as never;
    }),
    on(OrchRead.workspaceGet, async (req: any) => {
      looked.add(req.workspace_id);
      await gate;
      return fixtures.workspace(req.workspace_id) as never;
    }),
    // Reached only by bodies the gateway let through; the 409 proves they got this far.
    on(Holds.wakeupCreate, async () => {
      throw conflict('fake holds service');
    }),
    on(Orch.taskCreate, async (req: any) => {
      idempotencyKeys.push(req.idempotency_key);
      return fixtures.task(randomUUID(), WS1) as never;
    }),
  ]);
  await nc.flush();
});

afterAll(async () => {
  await gw?.running.stop();
  await nc?.close();
  await nats?.stop();
});

function send(path: string, body: Buffer | string, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const url = new URL(path, gw.http);
    const payload = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
    const req = httpRequest(
      url,
      {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': String(payload.length), ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : null });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** The route's path with its `:id` filled. */
const pathOf = (url: string) => url.replace(':id', randomUUID());

describe('keys (ADR 0020)', () => {
  it('accepts an operator token signed with the operator key', async () => {
    const res = await fetch(`${gw.http}/tasks/${randomUUID()}`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
  });
  it('refuses an operator token signed with the agent key (401)', async () => {
    const forged = await signOperatorToken(AGENT_KEY, { sub: 'mallory', workspaces: ['*'] });
    const res = await fetch(`${gw.http}/tasks/${randomUUID()}`, { headers: { authorization: `Bearer ${forged}` } });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('UNAUTHORIZED');
  });
  it('refuses an agent token, whichever key signed it (401)', async () => {
    for (const key of [AGENT_KEY, OPERATOR_KEY]) {
      const agent = await signAgentToken(key, { task_id: randomUUID(), mode: 'task' });
      expect((await fetch(`${gw.http}/tasks/${randomUUID()}`, { headers: { authorization: `Bearer ${agent}` } })).status).toBe(401);
    }
  });
});

describe('every route body: strings refuse NUL and lone surrogates (generated from the contracts)', () => {
  const bodyRoutes = API_ROUTES.filter((r) => r.body);
  it('covers the routes the probe found (this test can fail)', () => {
    expect(bodyRoutes.map((r) => r.url)).toEqual(
      expect.arrayContaining([
        '/tasks/:id/tree/pause',
        '/tasks/:id/tree/resume',
        '/tasks/:id/tree/cancel',
        '/tasks/:id/tree/restore',
        '/cost-events',
        '/wakeups',
      ]),
    );
  });
  it.each(bodyRoutes.map((r) => [`${r.method} ${r.url}`, r] as const))('%s: its contract guards every string', (_n, r) => {
    expect(unguardedStrings(r.endpoint.request as z.ZodType)).toEqual([]);
  });

  const cases = bodyRoutes.flatMap((r) => {
    const example = validExample(r.endpoint.request as z.ZodType);
    // What the gateway sets itself is not the caller's: the actor and the path id.
    delete example.actor;
    if (r.idField) delete example[r.idField];
    return poisonedCases(example).map((c) => ({ ...c, route: r }));
  });
  it.each(cases.map((c) => [`${c.route.method} ${c.route.url} ${c.name}`, c] as const))('%s → 400 VALIDATION_ERROR, nothing sent on', async (_n, c) => {
    const before = received.length;
    const answer = await sendWithMethod(c.route.method, pathOf(c.route.url), JSON.stringify(c.body));
    expect(answer.status).toBe(400);
    expect(answer.body.error.code).toBe('VALIDATION_ERROR');
    await nc.flush();
    expect(received.slice(before)).toEqual([]);
  });

  it("the probe's own cases", async () => {
    for (const verb of ['pause', 'resume', 'cancel', 'restore']) {
      for (const reason of ['a\u0000b', 'a\ud800b']) {
        const res = await send(`/tasks/${randomUUID()}/tree/${verb}`, JSON.stringify({ reason }));
        expect(res.status, `${verb} ${JSON.stringify(reason)}`).toBe(400);
        expect(res.body.error.code).toBe('VALIDATION_ERROR');
      }
    }
    const wake = await send('/wakeups', JSON.stringify({ task_id: randomUUID(), reason: 'r', payload: { prompt: 'a\u0000b' } }));
    expect([wake.status, wake.body.error.code]).toEqual([400, 'VALIDATION_ERROR']);
  });
});

function sendWithMethod(method: string, path: string, body: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(body, 'utf8');
    const req = httpRequest(
      new URL(path, gw.http),
      { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': String(payload.length) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString('utf8') || 'null') }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

describe('body encoding (docs/limits.md)', () => {
  const taskId = () => randomUUID();
  it('refuses bytes that are not UTF-8 with 400 BAD_REQUEST instead of storing U+FFFD', async () => {
    const before = received.length;
    // {"reason": "a<0xff>b"} and a CESU-8 lone surrogate (ED A0 80): neither is UTF-8.
    for (const bad of [Buffer.from([0xff]), Buffer.from([0xed, 0xa0, 0x80])]) {
      const body = Buffer.concat([Buffer.from('{"reason":"a'), bad, Buffer.from('b"}')]);
      const res = await send(`/tasks/${taskId()}/stop`, body);
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('BAD_REQUEST');
    }
    await nc.flush();
    expect(received.slice(before)).toEqual([]);
  });
  it('refuses a charset other than UTF-8 (400 BAD_REQUEST), accepts utf-8 in any spelling', async () => {
    const res = await send(`/tasks/${taskId()}/tree/pause`, '{"reason":"r"}', { 'content-type': 'application/json; charset=iso-8859-1' });
    expect([res.status, res.body.error.code]).toEqual([400, 'BAD_REQUEST']);
    expect(res.body.error.message).toMatch(/UTF-8/);
    for (const ct of ['application/json; charset=utf-8', 'application/json;charset="UTF-8"', 'application/json; charset=utf8']) {
      // Valid encoding, invalid content (a NUL): the body got as far as the contract.
      const ok = await send(`/tasks/${taskId()}/tree/pause`, '{"reason":"a\\u0000"}', { 'content-type': ct });
      expect([ok.status, ok.body.error.code], ct).toEqual([400, 'VALIDATION_ERROR']);
    }
  });
});

describe('/ws action payloads: strings refuse NUL and lone surrogates (generated from the contracts)', () => {
  const actions = [
    ['agent.cancel', Orch.agentCancel],
    ['task.stop', Orch.taskStop],
  ] as const;
  const cases = actions.flatMap(([action, endpoint]) => {
    const example = validExample(endpoint.request as z.ZodType);
    delete example.actor;
    return poisonedCases(example).map((c) => ({ ...c, action }));
  });
  it.each(cases.map((c) => [`${c.action} ${c.name}`, c] as const))('%s → VALIDATION_ERROR frame, nothing sent on', async (_n, c) => {
    const client = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    try {
      const before = received.length;
      const reply = await client.call(c.action, c.body);
      expect([reply.type, reply.payload.code]).toEqual(['error', 'VALIDATION_ERROR']);
      await nc.flush();
      expect(received.slice(before)).toEqual([]);
    } finally {
      await client.close();
    }
  });
});

describe('/ws subscription cap under a burst', () => {
  it(`1,500 subscribe frames sent at once on one socket: exactly ${MAX_SUBSCRIPTIONS_PER_SOCKET} succeed`, async () => {
    const c = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    let open!: () => void;
    gate = new Promise<void>((r) => (open = r));
    const lookedBefore = looked.size;
    try {
      const frames = Array.from({ length: 1_500 }, (_, i) =>
        JSON.stringify({ id: `s${i}`, type: 'request', action: 'subscribe', payload: { task_id: randomUUID() } }),
      );
      for (const f of frames) c.sendRaw(f);
      // Refusals come back at once; lookups wait at the gate, so no subscription is added before
      // every frame has been checked against the cap.
      const replies: Array<Record<string, any>> = [];
      for (let i = 0; i < 1_000; i++) replies.push(await c.next('reply', 20_000));
      open();
      for (let i = 0; i < 500; i++) replies.push(await c.next('reply', 20_000));
      const ok = replies.filter((r) => r.type === 'response' && r.payload.subscribed === true);
      const refused = replies.filter((r) => r.type === 'error');
      expect(ok).toHaveLength(MAX_SUBSCRIPTIONS_PER_SOCKET);
      expect(refused).toHaveLength(1_000);
      expect(new Set(refused.map((r) => r.payload.code))).toEqual(new Set(['CONFLICT']));
      // The refused ones never asked the orchestrator.
      expect(looked.size - lookedBefore).toBe(MAX_SUBSCRIPTIONS_PER_SOCKET);
      // Places come back when a lookup fails or a subscription ends: one more is refused, one after an unsubscribe is not.
      expect((await c.call('subscribe', { task_id: randomUUID() })).payload.code).toBe('CONFLICT');
      const first = ok[0]!.payload.task_id as string;
      await c.call('unsubscribe', { task_id: first });
      expect((await c.call('subscribe', { task_id: randomUUID() })).payload.subscribed).toBe(true);
    } finally {
      open();
      gate = Promise.resolve();
      await c.close();
    }
  }, 60_000);
});

describe('/ws workspace subscription cap under a burst (issue 53)', () => {
  it(`1,200 subscribe {workspace_id} frames sent at once on one socket: exactly ${MAX_SUBSCRIPTIONS_PER_SOCKET} succeed`, async () => {
    const c = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    let open!: () => void;
    gate = new Promise<void>((r) => (open = r));
    const lookedBefore = looked.size;
    try {
      for (let i = 0; i < 1_200; i++) c.sendRaw(JSON.stringify({ id: `w${i}`, type: 'request', action: 'subscribe', payload: { workspace_id: randomUUID() } }));
      // The 700 refusals come back while every lookup waits at the gate.
      const replies: Array<Record<string, any>> = [];
      for (let i = 0; i < 700; i++) replies.push(await c.next('reply', 20_000));
      open();
      for (let i = 0; i < 500; i++) replies.push(await c.next('reply', 20_000));
      const ok = replies.filter((r) => r.type === 'response' && r.payload.subscribed === true);
      const refused = replies.filter((r) => r.type === 'error');
      expect(ok).toHaveLength(MAX_SUBSCRIPTIONS_PER_SOCKET);
      expect(refused).toHaveLength(700);
      expect(new Set(refused.map((r) => r.payload.code))).toEqual(new Set(['CONFLICT']));
      expect(looked.size - lookedBefore).toBe(MAX_SUBSCRIPTIONS_PER_SOCKET);
      // Task and workspace subscriptions share the cap.
      expect((await c.call('subscribe', { task_id: randomUUID() })).payload.code).toBe('CONFLICT');
    } finally {
      open();
      gate = Promise.resolve();
      await c.close();
    }
  }, 60_000);
});

const nested = (depth: number) => `${'['.repeat(depth - 1)}{}${']'.repeat(depth - 1)}`;

describe(`JSON depth is bounded before parsing (${MAX_JSON_DEPTH} levels, issue 53)`, () => {
  it('a /wakeups payload nested 5,000 deep → 400 BAD_REQUEST, nothing sent on', async () => {
    const before = received.length;
    const res = await send('/wakeups', `{"task_id":"${randomUUID()}","reason":"r","payload":{"deep":${nested(5_000)}}}`);
    expect([res.status, res.body.error.code]).toEqual([400, 'BAD_REQUEST']);
    expect(res.body.error.details).toEqual({ max_depth: MAX_JSON_DEPTH });
    await nc.flush();
    expect(received.slice(before)).toEqual([]);
  });
  it(`exactly ${MAX_JSON_DEPTH} levels pass the gateway; one more does not; brackets inside strings do not count`, async () => {
    // body {} + payload {} + deep: MAX-2 levels = MAX levels in all.
    const atLimit = await send('/wakeups', `{"task_id":"${randomUUID()}","reason":"r","payload":{"deep":${nested(MAX_JSON_DEPTH - 2)}}}`);
    expect([atLimit.status, atLimit.body.error.code]).toEqual([409, 'CONFLICT']);
    const over = await send('/wakeups', `{"task_id":"${randomUUID()}","reason":"r","payload":{"deep":${nested(MAX_JSON_DEPTH - 1)}}}`);
    expect([over.status, over.body.error.code]).toEqual([400, 'BAD_REQUEST']);
    const strings = await send('/wakeups', JSON.stringify({ task_id: randomUUID(), reason: '[{'.repeat(100), payload: { s: '"\\[[[' } }));
    expect([strings.status, strings.body.error.code]).toEqual([409, 'CONFLICT']);
  });
  it('a /ws frame nested 5,000 deep → BAD_REQUEST frame', async () => {
    const c = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    try {
      c.sendRaw(`{"id":"d","type":"request","action":"task.stop","payload":{"x":${nested(5_000)}}}`);
      const reply = await c.next('reply');
      expect([reply.type, reply.payload.code]).toEqual(['error', 'BAD_REQUEST']);
    } finally {
      await c.close();
    }
  });
});

/** One raw HTTP/1.1 request with header bytes exactly as given; resolves with the status and body. */
function rawRequest(head: Buffer): Promise<{ status: number; body: any }> {
  const url = new URL(gw.http);
  return new Promise((resolve, reject) => {
    // write, not end: a half-closed socket is dropped by Node before a slow answer. The server closes (Connection: close).
    const socket = netConnect(Number(url.port), url.hostname, () => socket.write(head));
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const [headPart, ...rest] = text.split('\r\n\r\n');
      const status = Number(/^HTTP\/1\.1 (\d+)/.exec(headPart ?? '')?.[1] ?? 0);
      const body = rest.join('\r\n\r\n');
      resolve({ status, body: body ? JSON.parse(body.replace(/^[0-9a-f]+\r\n|\r\n0\r\n\r\n$/g, '')) : null });
    });
  });
}

const taskCreateHead = (headerLine: Buffer, body = `{"workspace_id":"${WS1}","title":"t"}`) =>
  Buffer.concat([
    Buffer.from(
      `POST /tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`,
    ),
    headerLine,
    Buffer.from(`\r\n\r\n${body}`),
  ]);

describe('header values are checked like bodies (issue 53)', () => {
  it('an Idempotency-Key that is not UTF-8 (0xFF, a CESU-8 surrogate) → 400 BAD_REQUEST, nothing sent on', async () => {
    for (const bad of [Buffer.from([0xff]), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from([0xc3])]) {
      const before = received.length;
      const res = await rawRequest(taskCreateHead(Buffer.concat([Buffer.from('Idempotency-Key: k'), bad])));
      expect([res.status, res.body?.error.code]).toEqual([400, 'BAD_REQUEST']);
      await nc.flush();
      expect(received.slice(before)).toEqual([]);
    }
  });
  it('any other header with such bytes → 400 too; NUL in a header → 400', async () => {
    const res = await rawRequest(taskCreateHead(Buffer.concat([Buffer.from('X-Note: a'), Buffer.from([0xff])])));
    expect([res.status, res.body?.error.code]).toEqual([400, 'BAD_REQUEST']);
    const nul = await rawRequest(taskCreateHead(Buffer.concat([Buffer.from('Idempotency-Key: a'), Buffer.from([0x00]), Buffer.from('b')])));
    expect(nul.status).toBe(400);
  });
  it('a UTF-8 Idempotency-Key reaches the orchestrator as the text the caller sent', async () => {
    const res = await rawRequest(taskCreateHead(Buffer.from('Idempotency-Key: clé-ключ', 'utf8')));
    expect(res.status).toBe(201);
    expect(idempotencyKeys.at(-1)).toBe('clé-ключ');
  });
});
