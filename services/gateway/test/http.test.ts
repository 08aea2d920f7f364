import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { conflict, forbidden, notFound, Orch, type Endpoint } from '@kandev/contracts';
import {
  connectNats,
  createLogger,
  on,
  serveEndpoints,
  signAgentToken,
  signOperatorToken,
  trace,
  type NatsConnection,
  type RunningService,
} from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { fixtures, operatorToken, SECRET, startGateway } from './helpers.js';

const WS1 = randomUUID();
const TASK = randomUUID();
const SESSION = randomUUID();
const FORBIDDEN_TASK = randomUUID();
const MISSING_TASK = randomUUID();
const BUSY_SESSION = randomUUID();
const EXEC = randomUUID();
const TURN = randomUUID();

interface Call {
  endpoint: string;
  req: Record<string, any>;
  requestId: string;
  traceId: string | undefined;
}

let nats: TestNats;
let nc: NatsConnection;
let gw: { running: RunningService; http: string };
let token: string;
const calls: Call[] = [];

/** Fake orchestrator: records what it received; a few ids answer with errors. */
function fake<E extends Endpoint>(endpoint: E, result: (req: any) => unknown) {
  return on(endpoint, async (req: any, ctx) => {
    calls.push({ endpoint: endpoint.name, req, requestId: ctx.requestId, traceId: trace.getActiveSpan()?.spanContext().traceId });
    if (req.task_id === FORBIDDEN_TASK) throw forbidden('task belongs to another workspace');
    if (req.task_id === MISSING_TASK) throw notFound('task not found');
    if (req.session_id === BUSY_SESSION) throw conflict('queue full', { size: 10, limit: 10 });
    return result(req) as never;
  });
}

const taskOf = (req: any) => fixtures.task(req.task_id ?? TASK, req.workspace_id ?? WS1);
const sessionOf = (req: any) => fixtures.session(req.session_id ?? SESSION, req.task_id ?? TASK);

beforeAll(async () => {
  nats = await startNats();
  gw = await startGateway(nats.url);
  nc = await connectNats({ url: nats.url, name: 'gateway-http-test' });
  token = await operatorToken([WS1]);
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake-orch', queue: 'orchestrator', log: createLogger('fake', 'silent') }, [
    fake(Orch.workspaceCreate, (req) => fixtures.workspace(WS1, req.name)),
    fake(Orch.taskCreate, (req) => ({ ...taskOf(req), title: req.title })),
    fake(Orch.taskGet, (req) => ({ ...taskOf(req), sessions: [sessionOf({ task_id: req.task_id })], hold: null })),
    fake(Orch.taskUpdate, (req) => ({ ...taskOf(req), ...(req.title ? { title: req.title } : {}), ...(req.status ? { status: req.status } : {}) })),
    fake(Orch.sessionStart, (req) => ({ ...sessionOf({ task_id: req.task_id }), ...(req.idempotency_key === 'seen' ? { replayed: true } : {}) })),
    fake(Orch.taskQueueDelete, (req) => fixtures.queued(req.message_id, req.task_id)),
    fake(Orch.taskQueueResume, (req) => ({ task_id: req.task_id, resumed: true, delivered_message_id: null, size: 0 })),
    fake(Orch.sessionGet, (req) => ({ ...sessionOf(req), execution: null, turns: [] })),
    fake(Orch.sessionPrompt, () => ({ turn_id: TURN })),
    fake(Orch.agentCancel, (req) => ({ success: true, session_id: req.session_id })),
    fake(Orch.taskStop, (req) => ({ task_id: req.task_id, status: 'stopped', executions: [{ session_id: SESSION, execution_id: EXEC, orphaned: false }] })),
    fake(Orch.taskExecutions, () => [{ execution_id: EXEC, session_id: SESSION, status: 'RUNNING', pid: 4242, protocol: 'acp', instance_id: 'life-1' }]),
    fake(Orch.taskQueue, () => []),
    fake(Orch.taskAudit, () => []),
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

const api = (path: string, init: RequestInit & { token?: string | null } = {}) => {
  const headers = new Headers(init.headers);
  const t = init.token === undefined ? token : init.token;
  if (t) headers.set('authorization', `Bearer ${t}`);
  if (init.body !== undefined && !headers.has('content-type')) headers.set('content-type', 'application/json');
  return fetch(`${gw.http}${path}`, { ...init, headers });
};

describe('authentication', () => {
  it('answers 401 UNAUTHORIZED without a token, in the SPEC error shape, and calls nothing', async () => {
    const res = await api(`/tasks/${TASK}`, { token: null });
    expect(res.status).toBe(401);
    const body = await res.json();
    expect(body).toEqual({ error: { code: 'UNAUTHORIZED', message: expect.any(String) } });
    expect(res.headers.get('x-request-id')).toBeTruthy();
    expect(calls).toHaveLength(0);
  });

  it('rejects a token signed with another secret, an expired one and an agent token', async () => {
    const foreign = await signOperatorToken('another-secret-0123456789', { sub: 'mallory', workspaces: ['*'] });
    const expired = await signOperatorToken(SECRET, { sub: 'alice', workspaces: ['*'] }, (Math.floor(Date.now() / 1000) - 60) as never);
    const agent = await signAgentToken(SECRET, { task_id: TASK });
    for (const t of [foreign, expired, agent, 'not-a-jwt']) {
      const res = await api(`/tasks/${TASK}`, { token: t });
      expect(res.status).toBe(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('UNAUTHORIZED');
    }
    const basic = await fetch(`${gw.http}/tasks/${TASK}`, { headers: { authorization: 'Basic YWxpY2U6eA==' } });
    expect(basic.status).toBe(401);
    expect(calls).toHaveLength(0);
  });

  it('checks the token before the body: no token + malformed JSON is 401, not 400', async () => {
    const res = await api('/tasks', { method: 'POST', body: '{"title":', token: null });
    expect(res.status).toBe(401);
  });

  it('puts the verified operator, with its workspaces, into the request as the actor', async () => {
    const scoped = await signOperatorToken(SECRET, { sub: 'bob', workspaces: [WS1, 'other-ws'] });
    const res = await api(`/tasks/${TASK}`, { token: scoped });
    expect(res.status).toBe(200);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.req.actor).toEqual({ type: 'operator', id: 'bob', workspaces: [WS1, 'other-ws'] });
  });

  it('does not let a body claim another identity or another task', async () => {
    const other = randomUUID();
    const res = await api(`/tasks/${TASK}/stop`, {
      method: 'POST',
      body: JSON.stringify({ actor: { type: 'operator', id: 'root', workspaces: ['*'] }, task_id: other, reason: 'operator said so' }),
    });
    expect(res.status).toBe(200);
    expect(calls[0]!.req).toMatchObject({ task_id: TASK, reason: 'operator said so', actor: { type: 'operator', id: 'alice', workspaces: [WS1] } });
  });
});

describe('errors', () => {
  it('maps the orchestrator FORBIDDEN to 403 and NOT_FOUND to 404 with the error body', async () => {
    const f = await api(`/tasks/${FORBIDDEN_TASK}`);
    expect(f.status).toBe(403);
    expect(await f.json()).toEqual({ error: { code: 'FORBIDDEN', message: 'task belongs to another workspace' } });
    const n = await api(`/tasks/${MISSING_TASK}/stop`, { method: 'POST' });
    expect(n.status).toBe(404);
    expect(await n.json()).toEqual({ error: { code: 'NOT_FOUND', message: 'task not found' } });
  });

  it('carries details of a service error (CONFLICT → 409)', async () => {
    const res = await api(`/sessions/${BUSY_SESSION}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: 'hi' }) });
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({ error: { code: 'CONFLICT', message: 'queue full', details: { size: 10, limit: 10 } } });
  });

  it('answers malformed JSON with 400 BAD_REQUEST and sends nothing on', async () => {
    const res = await api('/tasks', { method: 'POST', body: '{"workspace_id": ' });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: { code: 'BAD_REQUEST', message: expect.any(String) } });
    expect(calls).toHaveLength(0);
  });

  it('answers a body that is not JSON at all (text/plain) with BAD_REQUEST', async () => {
    const res = await api('/tasks', { method: 'POST', body: 'hello', headers: { 'content-type': 'text/plain' } });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('BAD_REQUEST');
  });

  it('answers a body that breaks the contract with VALIDATION_ERROR and the issues', async () => {
    const res = await api('/tasks', { method: 'POST', body: JSON.stringify({ workspace_id: WS1 }) });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; details: { issues: unknown[] } } };
    expect(body.error.code).toBe('VALIDATION_ERROR');
    expect(body.error.details.issues).toEqual(expect.arrayContaining([expect.objectContaining({ path: 'title' })]));
    const arr = await api('/tasks', { method: 'POST', body: '[1,2]' });
    expect(arr.status).toBe(400);
    expect(((await arr.json()) as { error: { code: string } }).error.code).toBe('VALIDATION_ERROR');
    expect(calls).toHaveLength(0);
  });

  it('answers a path id that is not a UUID with 400 VALIDATION_ERROR', async () => {
    for (const path of ['/tasks/not-a-uuid', '/sessions/123/prompt', '/tasks/x/stop']) {
      const res = await api(path, {
        method: path.endsWith('prompt') || path.endsWith('stop') ? 'POST' : 'GET',
        ...(path.endsWith('prompt') ? { body: '{"prompt":"x"}' } : {}),
      });
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error: { code: 'VALIDATION_ERROR', message: 'path parameter id must be a UUID', details: { param: 'id' } } });
    }
    expect(calls).toHaveLength(0);
  });

  it('answers unknown routes and methods with 404 NOT_FOUND in the same shape', async () => {
    for (const [method, path] of [
      ['GET', '/nope'],
      ['DELETE', `/tasks/${TASK}`],
      ['PUT', '/tasks'],
    ]) {
      const res = await api(path!, { method: method! });
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ error: { code: 'NOT_FOUND', message: expect.any(String) } });
    }
  });
});

describe('routes', () => {
  const cases: Array<{
    method: string;
    path: () => string;
    body?: unknown;
    endpoint: string;
    status: number;
    sent: Record<string, unknown>;
    reply: (b: any) => void;
  }> = [
    {
      method: 'POST',
      path: () => '/workspaces',
      body: { name: 'acme' },
      endpoint: 'orch.workspace.create',
      status: 201,
      sent: { name: 'acme' },
      reply: (b) => expect(b).toMatchObject({ id: WS1, name: 'acme' }),
    },
    {
      method: 'POST',
      path: () => '/tasks',
      body: { workspace_id: WS1, title: 'Fix it', office: false, agent: 'scripted-acp' },
      endpoint: 'orch.task.create',
      status: 201,
      sent: { workspace_id: WS1, title: 'Fix it', office: false, agent: 'scripted-acp' },
      reply: (b) => expect(b).toMatchObject({ workspace_id: WS1, title: 'Fix it', status: 'TODO' }),
    },
    {
      method: 'GET',
      path: () => `/tasks/${TASK}`,
      endpoint: 'orch.task.get',
      status: 200,
      sent: { task_id: TASK },
      reply: (b) => expect(b.sessions).toHaveLength(1),
    },
    {
      method: 'PATCH',
      path: () => `/tasks/${TASK}`,
      body: { status: 'REVIEW', archived: true },
      endpoint: 'orch.task.update',
      status: 200,
      sent: { task_id: TASK, status: 'REVIEW', archived: true },
      reply: (b) => expect(b.status).toBe('REVIEW'),
    },
    {
      method: 'POST',
      path: () => `/tasks/${TASK}/sessions`,
      body: { prompt: 'go' },
      endpoint: 'orch.session.start',
      status: 201,
      sent: { task_id: TASK, prompt: 'go' },
      reply: (b) => expect(b).toMatchObject({ task_id: TASK, state: 'RUNNING' }),
    },
    {
      method: 'GET',
      path: () => `/sessions/${SESSION}`,
      endpoint: 'orch.session.get',
      status: 200,
      sent: { session_id: SESSION },
      reply: (b) => expect(b).toMatchObject({ id: SESSION, execution: null, turns: [] }),
    },
    {
      method: 'POST',
      path: () => `/sessions/${SESSION}/prompt`,
      body: { prompt: 'more' },
      endpoint: 'orch.session.prompt',
      status: 202,
      sent: { session_id: SESSION, prompt: 'more' },
      reply: (b) => expect(b).toEqual({ turn_id: TURN }),
    },
    {
      method: 'POST',
      path: () => `/sessions/${SESSION}/cancel`,
      endpoint: 'orch.agent.cancel',
      status: 200,
      sent: { session_id: SESSION },
      reply: (b) => expect(b).toEqual({ success: true, session_id: SESSION }),
    },
    {
      method: 'POST',
      path: () => `/tasks/${TASK}/stop`,
      endpoint: 'orch.task.stop',
      status: 200,
      sent: { task_id: TASK },
      reply: (b) => expect(b).toEqual({ task_id: TASK, status: 'stopped', executions: [{ session_id: SESSION, execution_id: EXEC, orphaned: false }] }),
    },
    {
      method: 'GET',
      path: () => `/tasks/${TASK}/executions`,
      endpoint: 'orch.task.executions',
      status: 200,
      sent: { task_id: TASK },
      reply: (b) => expect(b).toEqual([{ execution_id: EXEC, session_id: SESSION, status: 'RUNNING', pid: 4242, protocol: 'acp', instance_id: 'life-1' }]),
    },
    {
      method: 'GET',
      path: () => `/tasks/${TASK}/queue`,
      endpoint: 'orch.task.queue',
      status: 200,
      sent: { task_id: TASK },
      reply: (b) => expect(b).toEqual([]),
    },
    {
      method: 'GET',
      path: () => `/tasks/${TASK}/audit`,
      endpoint: 'orch.task.audit',
      status: 200,
      sent: { task_id: TASK },
      reply: (b) => expect(b).toEqual([]),
    },
  ];

  it.each(cases)('$method $endpoint answers $status', async (c) => {
    const res = await api(c.path(), { method: c.method, ...(c.body !== undefined ? { body: JSON.stringify(c.body) } : {}) });
    expect(res.status).toBe(c.status);
    expect(res.headers.get('content-type')).toMatch(/application\/json/);
    c.reply(await res.json());
    expect(calls.map((x) => x.endpoint)).toEqual([c.endpoint]);
    expect(calls[0]!.req).toEqual({ ...c.sent, actor: { type: 'operator', id: 'alice', workspaces: [WS1] } });
  });

  it('Idempotency-Key becomes idempotency_key; a replayed start is 200, a fresh one 201', async () => {
    const fresh = await api(`/tasks/${TASK}/sessions`, { method: 'POST', body: '{}', headers: { 'idempotency-key': 'new' } });
    expect(fresh.status).toBe(201);
    const replay = await api(`/tasks/${TASK}/sessions`, { method: 'POST', body: '{}', headers: { 'idempotency-key': 'seen' } });
    expect(replay.status).toBe(200);
    expect(await replay.json()).toMatchObject({ replayed: true });
    expect(calls.map((c) => c.req.idempotency_key)).toEqual(['new', 'seen']);
    await api(`/sessions/${SESSION}/prompt`, { method: 'POST', body: '{"prompt":"x"}', headers: { 'idempotency-key': 'p' } });
    expect(calls.at(-1)!.req).toMatchObject({ session_id: SESSION, prompt: 'x', idempotency_key: 'p' });
    // A body naming another key than the header: VALIDATION_ERROR, nothing sent.
    calls.length = 0;
    const both = await api('/tasks', {
      method: 'POST',
      body: JSON.stringify({ workspace_id: WS1, title: 't', idempotency_key: 'a' }),
      headers: { 'idempotency-key': 'b' },
    });
    expect(both.status).toBe(400);
    expect(calls).toHaveLength(0);
  });

  it('DELETE /tasks/:id/queue/:message_id and POST /tasks/:id/queue/resume', async () => {
    const msg = randomUUID();
    const del = await api(`/tasks/${TASK}/queue/${msg}`, { method: 'DELETE' });
    expect(del.status).toBe(200);
    expect(calls.at(-1)).toMatchObject({ endpoint: 'orch.task.queue.delete', req: { task_id: TASK, message_id: msg } });
    expect((await api(`/tasks/${TASK}/queue/not-a-uuid`, { method: 'DELETE' })).status).toBe(400);
    const resume = await api(`/tasks/${TASK}/queue/resume`, { method: 'POST' });
    expect(resume.status).toBe(200);
    expect(await resume.json()).toEqual({ task_id: TASK, resumed: true, delivered_message_id: null, size: 0 });
  });

  it('treats an empty body with a JSON content type as no body', async () => {
    const res = await fetch(`${gw.http}/sessions/${SESSION}/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    });
    expect(res.status).toBe(200);
  });
});

describe('request id and trace context', () => {
  it('forwards the caller x-request-id to the orchestrator and echoes it', async () => {
    const res = await api(`/tasks/${TASK}`, { headers: { 'x-request-id': 'req-abc-123' } });
    expect(res.headers.get('x-request-id')).toBe('req-abc-123');
    expect(calls[0]!.requestId).toBe('req-abc-123');
  });

  it('mints a UUID request id when none (or an unusable one) is given', async () => {
    const res = await api(`/tasks/${TASK}`, { headers: { 'x-request-id': 'x'.repeat(500) } });
    const rid = res.headers.get('x-request-id');
    expect(rid).toMatch(/^[0-9a-f-]{36}$/);
    expect(calls[0]!.requestId).toBe(rid);
  });

  it('continues an incoming traceparent through NATS to the orchestrator', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    await api(`/tasks/${TASK}`, { headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } });
    expect(calls[0]!.traceId).toBe(traceId);
  });
});
