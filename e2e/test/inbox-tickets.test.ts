import { connect as netConnect } from 'node:net';
import postgres from 'postgres';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signOperatorToken } from '@kandev/runtime';
import { signWsTicket } from '@kandev/runtime/ws-ticket';
import { ApiClient, eventually, WsClient } from '@kandev/testkit';
import { makeTask, sharedWorld, type SharedWorld } from './support.js';

/**
 * end to end, and the gateway's smaller holes of issue 53, on the real stack:
 * - GET /inbox: a workspace's pending question bundles and permission requests, children included,
 *   oldest first, scoped by the token; `inbox.changed` reaches workspace subscribers.
 * - /ws tickets (ADR 0058): single use (also under concurrent redemption), expired, forged and
 *   foreign-workspace tickets refused.
 * - a body nested 5,000 deep and header bytes that are not UTF-8 → 400.
 */
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

const askScript = (text: string) => JSON.stringify({ script: [{ ask: [{ id: 'q1', text }] }] });
const permissionScript = (text: string) => JSON.stringify({ script: [{ permission: text }] });

/** An upgrade that must be refused: its HTTP status and error body. */
function refused(url: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const s = new WebSocket(url);
    s.once('open', () => {
      s.close();
      reject(new Error('upgrade was accepted'));
    });
    s.once('unexpected-response', (req, res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => {
        req.destroy();
        resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : null });
      });
    });
    s.once('error', () => undefined);
  });
}

/** Open /ws with a ticket: the open socket, or the refusal's status. */
function openWithTicket(ticket: string): Promise<WebSocket | number> {
  return new Promise((resolve) => {
    const s = new WebSocket(`${w.stack.wsUrl}?ticket=${encodeURIComponent(ticket)}`);
    s.once('open', () => resolve(s));
    s.once('unexpected-response', (req, res) => {
      req.destroy();
      resolve(res.statusCode ?? 0);
    });
    s.once('error', () => undefined);
  });
}

async function ticketOf(api: ApiClient): Promise<{ ticket: string; expires_at: string }> {
  const r = await api.post('/ws/tickets', undefined);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

describe('GET /inbox and inbox.changed (R-12.2)', () => {
  it("lists a workspace's pending questions and permission requests, a child's included, oldest first, scoped by the token", async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Inbox root' });
    const child = await w.api.ok('POST', '/tasks', { workspace_id, parent_id: root.id, title: 'Inbox child' });
    const other = await makeTask(w.api, { title: 'Other workspace' });
    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      expect((await ws.request('subscribe', { workspace_id })).type).toBe('response');
      expect((await w.api.get(`/inbox?workspace_id=${workspace_id}`)).body).toEqual({ items: [], truncated: false });

      // The child asks first, then the root asks permission, then something waits in another workspace.
      const childSession = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: askScript('Which database?') });
      const first = await eventually(async () => {
        const items = (await w.api.get(`/inbox?workspace_id=${workspace_id}`)).body.items;
        return items.length === 1 ? items[0] : null;
      }, 45_000);
      expect(first).toMatchObject({
        kind: 'clarification',
        task_id: child.id,
        task_title: 'Inbox child',
        session_id: childSession.id,
        text: 'Which database?',
        ancestor_ids: [root.id],
      });
      expect(Date.parse(first.expires_at)).toBeGreaterThan(Date.parse(first.created_at));
      const opened = await ws.waitFor((f) => f.action === 'inbox.changed' && f.payload.kind === 'clarification' && f.payload.change === 'opened');
      expect(opened.payload).toMatchObject({ workspace_id, task_id: child.id, id: first.id });

      const rootSession = await w.api.ok('POST', `/tasks/${root.id}/sessions`, { prompt: permissionScript('run ls?') });
      await w.api.ok('POST', `/tasks/${other.task.id}/sessions`, { prompt: permissionScript('elsewhere?') });
      const both = await eventually(async () => {
        const items = (await w.api.get(`/inbox?workspace_id=${workspace_id}`)).body.items;
        return items.length === 2 ? items : null;
      }, 45_000);
      expect(both.map((i: { kind: string; task_id: string }) => [i.kind, i.task_id])).toEqual([
        ['clarification', child.id],
        ['permission', root.id],
      ]);
      expect(both[1]).toMatchObject({ session_id: rootSession.id, text: 'run ls?', task_title: 'Inbox root', ancestor_ids: [], expires_at: null });
      await ws.waitFor(
        (f) => f.action === 'inbox.changed' && f.payload.kind === 'permission' && f.payload.change === 'opened' && f.payload.task_id === root.id,
      );
      // The other workspace's request is in its own inbox only.
      const elsewhere = await eventually(async () => {
        const items = (await w.api.get(`/inbox?workspace_id=${other.workspace_id}`)).body.items;
        return items.length === 1 ? items : null;
      }, 45_000);
      expect(elsewhere[0]).toMatchObject({ kind: 'permission', task_id: other.task.id });
      // A workspace subscriber of A never hears of B's inbox.
      expect(ws.notifications.some((f) => f.action === 'inbox.changed' && f.payload.workspace_id !== workspace_id)).toBe(false);

      // Scoped by the token: a token for the other workspace only is refused here; the query is required.
      const scoped = new ApiClient(w.stack.gatewayUrl, await signOperatorToken(w.stack.operatorKey, { sub: 'bob', workspaces: [other.workspace_id] }));
      expect((await scoped.get(`/inbox?workspace_id=${workspace_id}`)).status).toBe(403);
      expect((await scoped.get(`/inbox?workspace_id=${other.workspace_id}`)).body.items).toHaveLength(1);
      const missing = await w.api.get('/inbox');
      expect([missing.status, missing.body.error.code]).toEqual([400, 'VALIDATION_ERROR']);

      // Answering closes it: inbox.changed (closed) and the inbox holds the question only.
      const permission = both[1];
      const allow = ((await w.api.get(`/tasks/${root.id}/permissions`)).body as Array<any>)[0].options.find((o: { kind: string }) => o.kind === 'allow_once');
      expect((await w.api.post(`/permissions/${permission.id}/respond`, { option_id: allow.option_id })).status).toBe(200);
      await ws.waitFor((f) => f.action === 'inbox.changed' && f.payload.change === 'closed' && f.payload.id === permission.id);
      expect((await w.api.get(`/inbox?workspace_id=${workspace_id}`)).body.items.map((i: { id: string }) => i.id)).toEqual([first.id]);
      // Skipping the question empties it.
      expect((await w.api.post(`/clarification/${first.id}/cancel`, {})).status).toBe(200);
      await ws.waitFor((f) => f.action === 'inbox.changed' && f.payload.change === 'closed' && f.payload.id === first.id);
      expect((await w.api.get(`/inbox?workspace_id=${workspace_id}`)).body.items).toEqual([]);
    } finally {
      ws.close();
      for (const t of [root.id, child.id, other.task.id]) await w.api.post(`/tasks/${t}/stop`, {});
    }
  }, 120_000);
});

describe('/ws tickets (R-12.4, ADR 0058)', () => {
  it('a ticket opens /ws once, for 30 s; a second use is refused (401)', async () => {
    const before = Date.now();
    const { ticket, expires_at } = await ticketOf(w.api);
    const ttl = Date.parse(expires_at) - before;
    expect(ttl).toBeGreaterThan(28_000);
    expect(ttl).toBeLessThanOrEqual(31_000);
    const socket = await openWithTicket(ticket);
    expect(socket).toBeInstanceOf(WebSocket);
    (socket as WebSocket).close();
    const again = await refused(`${w.stack.wsUrl}?ticket=${encodeURIComponent(ticket)}`);
    expect([again.status, again.body.error.code, again.body.error.message]).toEqual([401, 'UNAUTHORIZED', 'ticket already used']);
  });

  it('ten upgrades racing with one ticket: exactly one opens (the single use is recorded where every replica checks)', async () => {
    const { ticket } = await ticketOf(w.api);
    const results = await Promise.all(Array.from({ length: 10 }, () => openWithTicket(ticket)));
    const opened = results.filter((r): r is WebSocket => r instanceof WebSocket);
    expect(opened).toHaveLength(1);
    expect(results.filter((r) => r === 401)).toHaveLength(9);
    opened[0]!.close();
  });

  it('an expired, forged or token-shaped ticket is refused (401), and a ticket is not a bearer token', async () => {
    const expired = await signWsTicket(
      w.stack.operatorKey,
      { sub: 'alice', workspaces: ['*'], operatorExpiresAtMs: Date.now() + 3_600_000 },
      30_000,
      Date.now() - 60_000,
    );
    const r1 = await refused(`${w.stack.wsUrl}?ticket=${encodeURIComponent(expired.ticket)}`);
    expect([r1.status, r1.body.error.message]).toEqual([401, 'ticket expired']);
    const forged = await signWsTicket(
      'not-the-operator-key-0123456789',
      { sub: 'mallory', workspaces: ['*'], operatorExpiresAtMs: Date.now() + 3_600_000 },
      30_000,
    );
    expect((await refused(`${w.stack.wsUrl}?ticket=${encodeURIComponent(forged.ticket)}`)).status).toBe(401);
    // An operator token in ?ticket= is not a ticket; a ticket as a bearer token is not a token.
    expect((await refused(`${w.stack.wsUrl}?ticket=${encodeURIComponent(w.token)}`)).status).toBe(401);
    const { ticket } = await ticketOf(w.api);
    expect((await new ApiClient(w.stack.gatewayUrl, ticket).get('/workspaces')).status).toBe(401);
    // Minting needs a token.
    expect((await new ApiClient(w.stack.gatewayUrl, null).post('/ws/tickets', undefined)).status).toBe(401);
  });

  it("a ticket is bound to its token's workspaces", async () => {
    const mine = await makeTask(w.api, { title: 'ticket scope' });
    const theirs = await makeTask(w.api, { title: 'not yours' });
    const scoped = new ApiClient(w.stack.gatewayUrl, await signOperatorToken(w.stack.operatorKey, { sub: 'carol', workspaces: [mine.workspace_id] }));
    const { ticket } = await ticketOf(scoped);
    const socket = await openWithTicket(ticket);
    expect(socket).toBeInstanceOf(WebSocket);
    const s = socket as WebSocket;
    try {
      const replies: any[] = [];
      s.on('message', (d) => replies.push(JSON.parse(String(d))));
      s.send(JSON.stringify({ id: '1', type: 'request', action: 'subscribe', payload: { workspace_id: theirs.workspace_id } }));
      s.send(JSON.stringify({ id: '2', type: 'request', action: 'subscribe', payload: { workspace_id: mine.workspace_id } }));
      s.send(JSON.stringify({ id: '3', type: 'request', action: 'task.stop', payload: { task_id: theirs.task.id } }));
      const byId = await eventually(async () => (replies.length >= 3 ? Object.fromEntries(replies.map((r) => [r.id, r])) : null), 15_000);
      expect([byId['1'].type, byId['1'].payload.code]).toEqual(['error', 'FORBIDDEN']);
      expect(byId['2']).toMatchObject({ type: 'response', payload: { subscribed: true } });
      expect(byId['3'].type).toBe('error');
      expect(['FORBIDDEN', 'NOT_FOUND']).toContain(byId['3'].payload.code);
    } finally {
      s.close();
    }
  });
});

/** One raw HTTP/1.1 request with its bytes exactly as given: the status line's code and the JSON body. */
function raw(bytes: Buffer): Promise<{ status: number; body: any }> {
  const url = new URL(w.stack.gatewayUrl);
  return new Promise((resolve, reject) => {
    const socket = netConnect(Number(url.port), url.hostname, () => socket.write(bytes));
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const i = text.indexOf('\r\n\r\n');
      resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0), body: i >= 0 && text.length > i + 4 ? JSON.parse(text.slice(i + 4)) : null });
    });
  });
}

describe("the gateway's smaller holes (issue 53)", () => {
  it('1,200 subscribe {workspace_id} frames at once on one socket, each a real workspace: exactly 500 subscribe, 700 are CONFLICT', async () => {
    // 1,200 workspaces in one statement (the API would take minutes here), removed again afterwards.
    const sql = postgres(w.stack.db.url, { max: 1, onnotice: () => undefined });
    const tag = `cap-${Date.now()}`;
    const ids = (
      await sql<{ id: string }[]>`
        INSERT INTO orchestrator.workspaces (id, name, created_at)
        SELECT gen_random_uuid(), ${tag} || '-' || g, now() - interval '1 day' FROM generate_series(1, 1200) g RETURNING id`
    ).map((r) => r.id);
    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    const replies: any[] = [];
    ws.socket.on('message', (d) => {
      const f = JSON.parse(String(d));
      if (f.type !== 'notification') replies.push(f);
    });
    try {
      ids.forEach((id, i) => ws.sendRaw(JSON.stringify({ id: `c${i}`, type: 'request', action: 'subscribe', payload: { workspace_id: id } })));
      await eventually(async () => replies.length === 1_200, 60_000);
      const ok = replies.filter((r) => r.type === 'response' && r.payload.subscribed === true);
      const refused = replies.filter((r) => r.type === 'error');
      expect(ok).toHaveLength(500);
      expect(refused).toHaveLength(700);
      expect(new Set(refused.map((r) => r.payload.code))).toEqual(new Set(['CONFLICT']));
    } finally {
      ws.close();
      await sql`DELETE FROM orchestrator.workspaces WHERE id = ANY(${ids}::uuid[])`;
      await sql.end();
    }
  }, 120_000);

  it('a /wakeups payload nested 5,000 deep → 400 BAD_REQUEST (was 500)', async () => {
    const { task } = await makeTask(w.api);
    const deep = `${'['.repeat(4_999)}{}${']'.repeat(4_999)}`;
    const r = await w.api.call('POST', '/wakeups', `{"task_id":"${task.id}","reason":"deep","payload":{"x":${deep}}}`);
    expect([r.status, r.body.error.code]).toEqual([400, 'BAD_REQUEST']);
  });

  it('an Idempotency-Key that is not UTF-8 → 400, and nothing is created', async () => {
    const { workspace_id } = await makeTask(w.api);
    const body = JSON.stringify({ workspace_id, title: 'latin1 key' });
    const head = `POST /tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${w.token}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nIdempotency-Key: k`;
    const r = await raw(Buffer.concat([Buffer.from(head), Buffer.from([0xff]), Buffer.from(`\r\n\r\n${body}`)]));
    expect([r.status, r.body.error.code]).toEqual([400, 'BAD_REQUEST']);
    const tasks = (await w.api.get(`/tasks?workspace_id=${workspace_id}&q=latin1`)).body.items;
    expect(tasks).toEqual([]);
  });
});
