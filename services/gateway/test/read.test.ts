import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { canAccessWorkspace, forbidden, notFound, Orch, OrchRead, type Actor } from '@kandev/contracts';
import { connectNats, createLogger, ensureEventStream, EventPublisher, on, serveEndpoints, type NatsConnection, type RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { fixtures, operatorToken, startGateway, WsTestClient } from './helpers.js';

/** The read routes and the workspace subscription at the gateway, against a fake orchestrator. */
const WS1 = randomUUID();
const WS2 = randomUUID();
const TASK = randomUUID();
const OTHER_TASK = randomUUID();
const SESSION = randomUUID();
const FOREIGN_SESSION = randomUUID();
const TURN = randomUUID();

let nats: TestNats;
let nc: NatsConnection;
let gw: { running: RunningService; http: string; ws: string };
let token: string;
let publisher: EventPublisher;
const calls: Array<{ endpoint: string; req: Record<string, any> }> = [];

/** The orchestrator's access rule, as the fake applies it: a workspace outside the token is FORBIDDEN. */
const guard = (actor: Actor, workspaceId: string) => {
  if (!canAccessWorkspace(actor, workspaceId)) throw forbidden('no access to this workspace');
  if (workspaceId !== WS1 && workspaceId !== WS2) throw notFound('workspace not found');
};

beforeAll(async () => {
  nats = await startNats();
  gw = await startGateway(nats.url);
  nc = await connectNats({ url: nats.url, name: 'gateway-read-test' });
  await ensureEventStream(nc);
  publisher = new EventPublisher(nc);
  token = await operatorToken([WS1]);
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake-orch', queue: 'orchestrator', log: createLogger('fake', 'silent') }, [
    on(OrchRead.workspaceList, async (req) => {
      calls.push({ endpoint: 'workspace.list', req });
      return { items: [fixtures.workspace(WS1)], next_cursor: 'next' };
    }),
    on(OrchRead.workspaceGet, async (req) => {
      calls.push({ endpoint: 'workspace.get', req });
      guard(req.actor, req.workspace_id);
      return fixtures.workspace(req.workspace_id);
    }),
    on(OrchRead.taskList, async (req) => {
      calls.push({ endpoint: 'task.list', req });
      guard(req.actor, req.workspace_id);
      return { items: [{ ...fixtures.task(TASK, req.workspace_id), child_count: 2, active_session_count: 1, hold: null }], next_cursor: null };
    }),
    on(Orch.taskGet, async (req) => ({ ...fixtures.task(req.task_id, WS1), sessions: [], hold: null })),
    on(OrchRead.sessionMessages, async (req) => {
      calls.push({ endpoint: 'session.messages', req });
      if (req.session_id === FOREIGN_SESSION) throw forbidden('no access to the workspace of this session');
      return {
        items: [{ seq: 1, turn_id: TURN, role: 'user' as const, kind: 'prompt' as const, text: 'hi', created_at: new Date().toISOString() }],
        next_cursor: null,
      };
    }),
  ]);
}, 60_000);
afterAll(async () => {
  await gw?.running.stop();
  await nc?.close();
  await nats?.stop();
});
beforeEach(() => {
  calls.length = 0;
});

const get = async (path: string) => {
  const res = await fetch(`${gw.http}${path}`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: (await res.json()) as any };
};
const actor = { type: 'operator', id: 'alice', workspaces: [WS1] };

describe('GET /workspaces', () => {
  it('forwards limit and cursor with the token’s operator', async () => {
    const r = await get('/workspaces?limit=10&cursor=abc');
    expect(r).toEqual({ status: 200, body: { items: [fixtures.workspace(WS1)].map((w) => ({ ...w, created_at: expect.any(String) })), next_cursor: 'next' } });
    expect(calls).toEqual([{ endpoint: 'workspace.list', req: { limit: 10, cursor: 'abc', actor } }]);
  });
  it('refuses a limit that is not a number, and a token-less request', async () => {
    expect((await get('/workspaces?limit=ten')).body.error.code).toBe('VALIDATION_ERROR');
    expect((await fetch(`${gw.http}/workspaces`)).status).toBe(401);
    expect(calls).toEqual([]);
  });
  it('GET /workspaces/:id answers one visible workspace, FORBIDDEN for another', async () => {
    expect((await get(`/workspaces/${WS1}`)).body).toMatchObject({ id: WS1 });
    expect(await get(`/workspaces/${WS2}`)).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
  });
});

describe('GET /tasks', () => {
  it('needs workspace_id: VALIDATION_ERROR without it, nothing asked', async () => {
    expect(await get('/tasks')).toMatchObject({ status: 400, body: { error: { code: 'VALIDATION_ERROR' } } });
    expect(calls).toEqual([]);
  });
  it('turns the query into the request: roots, a status list, q, limit, cursor', async () => {
    const r = await get(`/tasks?workspace_id=${WS1}&roots=true&status=TODO,REVIEW&status=BLOCKED&q=${encodeURIComponent('fix 100%')}&limit=20&cursor=c1`);
    expect(r.status).toBe(200);
    expect(r.body.items[0]).toMatchObject({ id: TASK, child_count: 2, active_session_count: 1, hold: null });
    expect(calls).toEqual([
      { endpoint: 'task.list', req: { workspace_id: WS1, roots: true, status: ['TODO', 'REVIEW', 'BLOCKED'], q: 'fix 100%', limit: 20, cursor: 'c1', actor } },
    ]);
    await get(`/tasks?workspace_id=${WS1}&parent_id=${TASK}`);
    expect(calls[1]!.req).toEqual({ workspace_id: WS1, parent_id: TASK, actor });
  });
  it('refuses bad values with VALIDATION_ERROR before asking', async () => {
    for (const q of [
      `workspace_id=nope`,
      `workspace_id=${WS1}&status=DONE`,
      `workspace_id=${WS1}&roots=yes`,
      `workspace_id=${WS1}&limit=-1`,
      `workspace_id=${WS1}&limit=0`,
      `workspace_id=${WS1}&workspace_id=${WS2}`,
    ]) {
      expect((await get(`/tasks?${q}`)).body.error.code, q).toBe('VALIDATION_ERROR');
    }
    expect(calls).toEqual([]);
  });
  it('another workspace is FORBIDDEN', async () => {
    expect(await get(`/tasks?workspace_id=${WS2}`)).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
  });
});

describe('GET /sessions/:id/messages', () => {
  it('forwards after_seq (or cursor) and limit', async () => {
    const r = await get(`/sessions/${SESSION}/messages?after_seq=3&limit=5`);
    expect(r.status).toBe(200);
    expect(r.body.items[0]).toMatchObject({ seq: 1, kind: 'prompt', role: 'user', text: 'hi', turn_id: TURN });
    await get(`/sessions/${SESSION}/messages?cursor=7`);
    expect(calls.map((c) => c.req)).toEqual([
      { after_seq: 3, limit: 5, session_id: SESSION, actor },
      { after_seq: 7, session_id: SESSION, actor },
    ]);
  });
  it('refuses a bad id or seq, and another workspace’s session', async () => {
    expect((await get('/sessions/nope/messages')).body.error.code).toBe('VALIDATION_ERROR');
    expect((await get(`/sessions/${SESSION}/messages?after_seq=x`)).body.error.code).toBe('VALIDATION_ERROR');
    expect(await get(`/sessions/${FOREIGN_SESSION}/messages`)).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
  });
});

describe('/ws subscribe {workspace_id}', () => {
  const message = (workspace_id: string, task_id: string, seq: number) =>
    publisher.emit(
      'session.message',
      { workspace_id, task_id, session_id: SESSION },
      { op: 'created', seq, turn_id: TURN, role: 'agent', kind: 'agent_text', text: `t${seq}`, created_at: new Date().toISOString() },
    );

  it('pushes every task event of the workspace, session.message included; unsubscribe stops it', async () => {
    const c = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    expect(await c.call('subscribe', { workspace_id: WS1 }, 's')).toEqual({
      id: 's',
      type: 'response',
      action: 'subscribe',
      payload: { subscribed: true, workspace_id: WS1 },
    });
    expect(calls).toEqual([{ endpoint: 'workspace.get', req: { workspace_id: WS1, actor } }]);
    await message(WS2, OTHER_TASK, 1); // another workspace: not pushed
    const ev = await message(WS1, OTHER_TASK, 2);
    expect(await c.next('notification')).toEqual({
      type: 'notification',
      action: 'session.message',
      payload: {
        op: 'created',
        seq: 2,
        turn_id: TURN,
        role: 'agent',
        kind: 'agent_text',
        text: 't2',
        created_at: expect.any(String),
        workspace_id: WS1,
        task_id: OTHER_TASK,
        session_id: SESSION,
        event_id: ev.id,
        occurred_at: ev.occurred_at,
      },
    });
    await publisher.emit(
      'task.state_changed',
      { workspace_id: WS1, task_id: TASK },
      { task: fixtures.task(TASK, WS1), from: 'TODO', to: 'IN_PROGRESS', reason: null },
    );
    expect((await c.next('notification')).action).toBe('task.state_changed');
    // A new task reaches the board at once, not only at its first status change.
    await publisher.emit('task.created', { workspace_id: WS1, task_id: OTHER_TASK }, { task: fixtures.task(OTHER_TASK, WS1) });
    expect(await c.next('notification')).toMatchObject({ action: 'task.created', payload: { task: { id: OTHER_TASK }, workspace_id: WS1 } });
    expect(await c.call('unsubscribe', { workspace_id: WS1 })).toMatchObject({ type: 'response', payload: { subscribed: false, workspace_id: WS1 } });
    // A task subscription on the same socket still works, and proves the workspace one is gone.
    await c.call('subscribe', { task_id: TASK });
    await message(WS1, OTHER_TASK, 3);
    await message(WS1, TASK, 4);
    expect((await c.next('notification')).payload.seq).toBe(4);
    expect(c.pendingNotifications()).toBe(0);
    await c.close();
  });

  it('refuses a workspace outside the token (FORBIDDEN), an unknown one (NOT_FOUND) and a malformed id', async () => {
    const c = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    expect((await c.call('subscribe', { workspace_id: WS2 })).payload.code).toBe('FORBIDDEN');
    expect((await c.call('subscribe', { workspace_id: 'nope' })).payload.code).toBe('VALIDATION_ERROR');
    const all = await WsTestClient.open(gw.ws, { authorization: `Bearer ${await operatorToken(['*'])}` });
    expect((await all.call('subscribe', { workspace_id: randomUUID() })).payload.code).toBe('NOT_FOUND');
    // Nothing of WS2 reaches the refused socket.
    await c.call('subscribe', { task_id: TASK });
    await message(WS2, OTHER_TASK, 5);
    await message(WS1, TASK, 6);
    expect((await c.next('notification')).payload.seq).toBe(6);
    expect(c.pendingNotifications()).toBe(0);
    await Promise.all([c.close(), all.close()]);
  });
});
