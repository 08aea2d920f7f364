import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { forbidden, notFound, Orch, OrchMcp } from '@kandev/contracts';
import {
  connectNats,
  createLogger,
  ensureEventStream,
  EventPublisher,
  on,
  request,
  serveEndpoints,
  signOperatorToken,
  type NatsConnection,
  type RunningService,
} from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { fixtures, operatorToken, refusedUpgrade, SECRET, startGateway, WsTestClient } from './helpers.js';

const WS1 = randomUUID();
const TASK_A = randomUUID();
const TASK_B = randomUUID();
const TASK_C = randomUUID();
const FORBIDDEN_TASK = randomUUID();
const SESSION = randomUUID();
const EXEC = randomUUID();
const TURN = randomUUID();

let nats: TestNats;
let nc: NatsConnection;
let gw: { running: RunningService; ws: string };
let token: string;
let publisher: EventPublisher;
const calls: Array<{ endpoint: string; req: any }> = [];
let mcpStopCalls = 0;

beforeAll(async () => {
  nats = await startNats();
  gw = await startGateway(nats.url);
  nc = await connectNats({ url: nats.url, name: 'gateway-ws-test' });
  await ensureEventStream(nc); // as an event-publishing service would; the gateway itself never creates it
  publisher = new EventPublisher(nc);
  token = await operatorToken([WS1]);
  const record = (endpoint: string, req: any) => calls.push({ endpoint, req });
  const log = createLogger('fake', 'silent');
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake-orch', queue: 'orchestrator', log }, [
    on(Orch.taskGet, async (req) => {
      record('orch.task.get', req);
      if (req.task_id === FORBIDDEN_TASK) throw forbidden('task belongs to another workspace');
      return { ...fixtures.task(req.task_id, WS1), sessions: [], hold: null };
    }),
    on(Orch.agentCancel, async (req) => {
      record('orch.agent.cancel', req);
      return { success: true as const, session_id: req.session_id };
    }),
    on(Orch.taskStop, async (req) => {
      record('orch.task.stop', req);
      if (req.task_id === TASK_C) throw notFound('execution not found');
      return { task_id: req.task_id, status: 'stopped' as const, executions: [] };
    }),
    // The MCP surface the gateway must never reach.
    on(OrchMcp.stopChildTask, async (req) => {
      mcpStopCalls++;
      return { task_id: req.task_id, status: 'not_running' as const };
    }),
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

const connect = () => WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
const cancelled = (taskId: string) =>
  publisher.emit(
    'session.agent.cancelled',
    { workspace_id: WS1, task_id: taskId, session_id: SESSION },
    { execution_id: EXEC, turn_id: TURN, stop_reason: 'cancelled' },
  );

describe('upgrade', () => {
  it('refuses an upgrade without a token with HTTP 401 UNAUTHORIZED', async () => {
    const r = await refusedUpgrade(gw.ws);
    expect(r.status).toBe(401);
    expect(r.body).toEqual({ error: { code: 'UNAUTHORIZED', message: expect.any(String) } });
  });

  it('refuses a bad token in the header or in ?token=', async () => {
    const foreign = await signOperatorToken('another-secret-0123456789', { sub: 'm', workspaces: ['*'] });
    expect((await refusedUpgrade(gw.ws, { authorization: `Bearer ${foreign}` })).status).toBe(401);
    expect((await refusedUpgrade(`${gw.ws}?token=${foreign}`)).status).toBe(401);
    expect((await refusedUpgrade(`${gw.ws}?token=garbage`)).status).toBe(401);
  });

  it('accepts the token in ?token= as well as in the header', async () => {
    const c = await WsTestClient.open(`${gw.ws}?token=${encodeURIComponent(token)}`);
    const r = await c.call('agent.cancel', { session_id: SESSION });
    expect(r.type).toBe('response');
    await c.close();
  });

  it('answers a plain GET /ws (no upgrade) with 400 BAD_REQUEST', async () => {
    const res = await fetch(gw.ws.replace(/^ws/, 'http'), { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('BAD_REQUEST');
  });
});

describe('frames', () => {
  let c: WsTestClient;
  beforeAll(async () => {
    c = await connect();
  });
  afterAll(async () => {
    await c.close();
  });

  it('answers a frame that is not JSON with BAD_REQUEST', async () => {
    c.sendRaw('this is not json');
    expect(await c.next('reply')).toEqual({ id: null, type: 'error', action: null, payload: { code: 'BAD_REQUEST', message: 'frame is not JSON' } });
  });

  it('answers an unknown action with UNKNOWN_ACTION, echoing id and action', async () => {
    expect(await c.call('task.explode', {}, '7')).toEqual({
      id: '7',
      type: 'error',
      action: 'task.explode',
      payload: { code: 'UNKNOWN_ACTION', message: expect.any(String) },
    });
    expect((await c.call('constructor', {})).payload.code).toBe('UNKNOWN_ACTION');
  });

  it('answers every mcp.* action with FORBIDDEN and never reaches the orchestrator MCP surface', async () => {
    const before = mcpStopCalls;
    expect(await c.call('mcp.stop_task', { task_id: TASK_A }, 'm1')).toEqual({
      id: 'm1',
      type: 'error',
      action: 'mcp.stop_task',
      payload: { code: 'FORBIDDEN', message: expect.any(String) },
    });
    for (const action of ['MCP.stop_task', ' mcp.message_task', 'mcp.whoami']) {
      expect((await c.call(action, { task_id: TASK_A })).payload.code).toBe('FORBIDDEN');
    }
    // Forbidden even when the rest of the frame is malformed.
    c.sendRaw(JSON.stringify({ action: 'mcp.stop_task' }));
    expect((await c.next('reply')).payload.code).toBe('FORBIDDEN');
    expect(mcpStopCalls).toBe(before);
    expect(calls).toHaveLength(0);
    // Positive control: the fake was live all along, so the zero above means something.
    await request(nc, OrchMcp.stopChildTask, { caller_task_id: TASK_B, task_id: TASK_A });
    expect(mcpStopCalls).toBe(before + 1);
  });

  it('round-trips agent.cancel through Orch.agentCancel with the operator as actor', async () => {
    expect(await c.call('agent.cancel', { session_id: SESSION }, '1')).toEqual({
      id: '1',
      type: 'response',
      action: 'agent.cancel',
      payload: { success: true, session_id: SESSION },
    });
    expect(calls).toEqual([{ endpoint: 'orch.agent.cancel', req: { session_id: SESSION, actor: { type: 'operator', id: 'alice', workspaces: [WS1] } } }]);
  });

  it('round-trips task.stop and carries the orchestrator error codes', async () => {
    expect(await c.call('task.stop', { task_id: TASK_A }, 's1')).toEqual({
      id: 's1',
      type: 'response',
      action: 'task.stop',
      payload: { task_id: TASK_A, status: 'stopped', executions: [] },
    });
    expect(await c.call('task.stop', { task_id: TASK_C }, 's2')).toEqual({
      id: 's2',
      type: 'error',
      action: 'task.stop',
      payload: { code: 'NOT_FOUND', message: 'execution not found' },
    });
  });

  it('answers a payload that breaks the contract with VALIDATION_ERROR', async () => {
    expect((await c.call('agent.cancel', { session_id: 'nope' })).payload.code).toBe('VALIDATION_ERROR');
    expect((await c.call('subscribe', {})).payload.code).toBe('VALIDATION_ERROR');
    expect((await c.call('task.stop', 'x')).payload.code).toBe('VALIDATION_ERROR');
  });

  it('answers a frame without type "request" or without id with BAD_REQUEST', async () => {
    c.sendRaw(JSON.stringify({ id: '1', action: 'agent.cancel', payload: { session_id: SESSION } }));
    expect((await c.next('reply')).payload.code).toBe('BAD_REQUEST');
    c.sendRaw(JSON.stringify({ type: 'request', action: 'agent.cancel', payload: { session_id: SESSION } }));
    expect((await c.next('reply')).payload.code).toBe('BAD_REQUEST');
    expect(calls).toHaveLength(0);
  });
});

describe('subscriptions', () => {
  it('pushes a subscribed task event as a notification, and nothing for other tasks', async () => {
    const c = await connect();
    expect(await c.call('subscribe', { task_id: TASK_A }, 'sub')).toEqual({
      id: 'sub',
      type: 'response',
      action: 'subscribe',
      payload: { subscribed: true, task_id: TASK_A },
    });
    expect(calls).toEqual([{ endpoint: 'orch.task.get', req: { task_id: TASK_A, actor: { type: 'operator', id: 'alice', workspaces: [WS1] } } }]);

    // An event for another task and a type that is not pushed go first; the first notification
    // must still be task A's (one publisher, one subscription: order is preserved).
    await cancelled(TASK_B);
    await publisher.emit('turn.started', { workspace_id: WS1, task_id: TASK_A, session_id: SESSION }, { execution_id: EXEC, turn_id: TURN });
    const ev = await cancelled(TASK_A);
    expect(await c.next('notification')).toEqual({
      type: 'notification',
      action: 'session.agent.cancelled',
      payload: {
        execution_id: EXEC,
        turn_id: TURN,
        stop_reason: 'cancelled',
        workspace_id: WS1,
        task_id: TASK_A,
        session_id: SESSION,
        event_id: ev.id,
        occurred_at: ev.occurred_at,
      },
    });
    expect(c.pendingNotifications()).toBe(0);
    await c.close();
  });

  it('stops pushing after unsubscribe', async () => {
    const c = await connect();
    await c.call('subscribe', { task_id: TASK_A });
    expect(await c.call('unsubscribe', { task_id: TASK_A })).toMatchObject({ type: 'response', payload: { subscribed: false, task_id: TASK_A } });
    await c.call('subscribe', { task_id: TASK_B });
    await cancelled(TASK_A);
    await cancelled(TASK_B);
    expect((await c.next('notification')).payload.task_id).toBe(TASK_B);
    expect(c.pendingNotifications()).toBe(0);
    await c.close();
  });

  it('refuses to subscribe to a task the orchestrator says the operator cannot see', async () => {
    const c = await connect();
    expect((await c.call('subscribe', { task_id: FORBIDDEN_TASK })).payload).toEqual({ code: 'FORBIDDEN', message: 'task belongs to another workspace' });
    await c.call('subscribe', { task_id: TASK_B });
    await cancelled(FORBIDDEN_TASK);
    await cancelled(TASK_B);
    expect((await c.next('notification')).payload.task_id).toBe(TASK_B);
    await c.close();
  });

  it('fans one event out to every subscribed socket, and reaches hold members', async () => {
    const [c1, c2] = await Promise.all([connect(), connect()]);
    await c1.call('subscribe', { task_id: TASK_A });
    await c2.call('subscribe', { task_id: TASK_B });
    await c2.call('subscribe', { task_id: TASK_A });
    await cancelled(TASK_A);
    expect((await c1.next('notification')).payload.task_id).toBe(TASK_A);
    expect((await c2.next('notification')).payload.task_id).toBe(TASK_A);
    // A hold rooted at A with B as a member reaches B's subscriber (once, although c2 watches both).
    const hold = {
      id: randomUUID(),
      workspace_id: WS1,
      root_task_id: TASK_A,
      mode: 'pause' as const,
      created_by: 'operator:alice',
      reason: 'lunch',
      created_at: new Date().toISOString(),
      released_at: null,
      released_by: null,
      released_reason: null,
      members: [
        { task_id: TASK_A, depth: 0, task_status: 'IN_PROGRESS' as const, skip_reason: null },
        { task_id: TASK_B, depth: 1, task_status: 'TODO' as const, skip_reason: null },
      ],
    };
    await publisher.emit('tree_hold.created', { workspace_id: WS1, task_id: TASK_A }, { hold });
    await cancelled(TASK_B);
    const n = await c2.next('notification');
    expect(n).toMatchObject({ action: 'tree_hold.created', payload: { hold: { id: hold.id }, task_id: TASK_A } });
    expect((await c2.next('notification')).action).toBe('session.agent.cancelled');
    expect((await c1.next('notification')).action).toBe('tree_hold.created');
    await Promise.all([c1.close(), c2.close()]);
  });

  it('keeps delivering to the remaining sockets after one closes', async () => {
    const [c1, c2] = await Promise.all([connect(), connect()]);
    await c1.call('subscribe', { task_id: TASK_A });
    await c2.call('subscribe', { task_id: TASK_A });
    await c1.close();
    await cancelled(TASK_A);
    expect((await c2.next('notification')).payload.task_id).toBe(TASK_A);
    await c2.close();
  });
});

describe('token expiry', () => {
  it('closes the socket with 4401 after an UNAUTHORIZED frame when the token expires', async () => {
    const short = await signOperatorToken(SECRET, { sub: 'alice', workspaces: [WS1] }, '2s');
    const c = await WsTestClient.open(gw.ws, { authorization: `Bearer ${short}` });
    const closed = new Promise<number>((r) => c.socket.once('close', (code) => r(code)));
    expect((await c.next('reply', 5_000)).payload.code).toBe('UNAUTHORIZED');
    expect(await closed).toBe(4401);
  });
});
