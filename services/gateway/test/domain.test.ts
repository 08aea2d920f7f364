import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { KandevError, PUSHED_EVENT_TYPES, eventSubject, type EventEnvelope } from '@kandev/contracts';
import { guardAction, isMcpAction } from '../src/domain/action-guard.js';
import { headerText, invalidHeader, jsonNestsDeeperThan, MAX_JSON_DEPTH } from '../src/domain/body.js';
import { parseClientFrame } from '../src/domain/frames.js';
import { withoutFields } from '../src/domain/openapi.js';
import { errorResponseOf } from '../src/domain/http-errors.js';
import { inboxChangeOf, isPushedSubject, notificationTargets, toNotification, workspaceKey } from '../src/domain/notifications.js';
import { readinessReport } from '../src/domain/readiness.js';
import { requestIdFrom } from '../src/domain/request-id.js';
import { SubscriptionRegistry } from '../src/ws/subscriptions.js';

describe('mcp action guard (R-7.1)', () => {
  it('forbids every mcp.* action, whatever the case or padding', () => {
    for (const a of ['mcp.stop_task', 'mcp.message_task', 'MCP.stop_task', ' mcp.x', 'Mcp.', 'mcp']) {
      expect(isMcpAction(a)).toBe(true);
      expect(guardAction(a)).toEqual({ code: 'FORBIDDEN', message: expect.any(String) });
    }
  });
  it('lets every other action through to dispatch', () => {
    for (const a of ['agent.cancel', 'task.stop', 'subscribe', 'mcpx.stop', 'task.mcp.stop', '']) {
      expect(isMcpAction(a)).toBe(false);
      expect(guardAction(a)).toBeNull();
    }
  });
});

describe('parseClientFrame', () => {
  it('parses a request frame', () => {
    expect(parseClientFrame('{"id":"1","type":"request","action":"agent.cancel","payload":{"session_id":"s"}}')).toEqual({
      ok: true,
      frame: { id: '1', action: 'agent.cancel', payload: { session_id: 's' }, traceparent: null },
    });
  });
  it('answers text that is not JSON with BAD_REQUEST', () => {
    expect(parseClientFrame('nope')).toEqual({
      ok: false,
      error: { id: null, type: 'error', action: null, payload: { code: 'BAD_REQUEST', message: 'frame is not JSON' } },
    });
    expect(parseClientFrame('[1]')).toMatchObject({ ok: false, error: { payload: { code: 'BAD_REQUEST' } } });
  });
  it('checks the mcp guard before the rest of the envelope', () => {
    expect(parseClientFrame('{"action":"mcp.stop_task"}')).toMatchObject({ ok: false, error: { action: 'mcp.stop_task', payload: { code: 'FORBIDDEN' } } });
    expect(parseClientFrame('{"id":9,"type":"request","action":"mcp.stop_task","payload":{}}')).toMatchObject({
      ok: false,
      error: { id: 9, payload: { code: 'FORBIDDEN' } },
    });
  });
  it('needs a request type, an action and an id', () => {
    expect(parseClientFrame('{"id":"1","action":"x"}')).toMatchObject({ ok: false, error: { id: '1', payload: { code: 'BAD_REQUEST' } } });
    expect(parseClientFrame('{"id":"1","type":"request"}')).toMatchObject({ ok: false, error: { payload: { code: 'BAD_REQUEST' } } });
    expect(parseClientFrame('{"type":"request","action":"x"}')).toMatchObject({ ok: false, error: { id: null, payload: { code: 'BAD_REQUEST' } } });
  });
  it('defaults a missing payload to {} and keeps an optional traceparent', () => {
    expect(parseClientFrame('{"id":"1","type":"request","action":"x","traceparent":"00-a-b-01"}')).toMatchObject({
      ok: true,
      frame: { payload: {}, traceparent: '00-a-b-01' },
    });
  });
});

describe('notifications', () => {
  const ws = randomUUID();
  const task = randomUUID();
  const session = randomUUID();
  const ev = (type: string, data: unknown, extra: Partial<EventEnvelope> = {}): EventEnvelope =>
    ({
      id: 'ev-1',
      type,
      version: 1,
      occurred_at: '2026-01-01T00:00:00.000Z',
      workspace_id: ws,
      task_id: task,
      session_id: session,
      actor: null,
      data,
      ...extra,
    }) as EventEnvelope;

  it('targets the event task and its workspace for pushed types only', () => {
    expect(notificationTargets(ev('session.agent.cancelled', {}))).toEqual([task, workspaceKey(ws)]);
    expect(notificationTargets(ev('session.message', {}))).toEqual([task, workspaceKey(ws)]);
    expect(notificationTargets(ev('turn.started', {}))).toEqual([]);
    expect(notificationTargets(ev('task.created', {}))).toEqual([task, workspaceKey(ws)]); // the board shows a new task at once
    expect(notificationTargets(ev('usage.recorded', {}))).toEqual([]);
    expect(notificationTargets(ev('agent.message', {}))).toEqual([]);
    expect(notificationTargets(ev('queue.changed', {}, { task_id: null }))).toEqual([workspaceKey(ws)]);
  });
  it('knows a pushed type by its subject alone, before the event is decoded', () => {
    for (const type of PUSHED_EVENT_TYPES) expect(isPushedSubject(eventSubject(type))).toBe(true);
    expect(isPushedSubject(eventSubject('agent.message'))).toBe(false);
    expect(isPushedSubject(eventSubject('turn.started'))).toBe(false);
    expect(isPushedSubject('kandev.evt.session')).toBe(false);
  });
  it('targets every member of a hold, once', () => {
    const child = randomUUID();
    const hold = { root_task_id: task, members: [{ task_id: task }, { task_id: child }] };
    expect(notificationTargets(ev('tree_hold.created', { hold })).sort()).toEqual([task, child, workspaceKey(ws)].sort());
  });
  it('builds the payload from data plus the envelope ids', () => {
    expect(toNotification(ev('session.agent.cancelled', { stop_reason: 'cancelled' }))).toEqual({
      type: 'notification',
      action: 'session.agent.cancelled',
      payload: { stop_reason: 'cancelled', workspace_id: ws, task_id: task, session_id: session, event_id: 'ev-1', occurred_at: '2026-01-01T00:00:00.000Z' },
    });
  });
  it('keeps the data session id when the envelope has none (queue.changed)', () => {
    const s2 = randomUUID();
    expect(toNotification(ev('queue.changed', { session_id: s2, size: 0, messages: [] }, { session_id: null })).payload.session_id).toBe(s2);
  });
});

describe('errorResponseOf', () => {
  it('keeps a KandevError code, message and details with the SPEC status', () => {
    expect(errorResponseOf(new KandevError('CONFLICT', 'full', { limit: 10 }))).toEqual({
      status: 409,
      body: { error: { code: 'CONFLICT', message: 'full', details: { limit: 10 } } },
      unexpected: false,
      retryAfterS: null,
    });
    expect(errorResponseOf(new KandevError('UNKNOWN_ACTION', 'x')).status).toBe(400);
    expect(errorResponseOf(new KandevError('UNAVAILABLE', 'x')).status).toBe(503);
  });
  it('a 503 refused for load carries Retry-After seconds; the body keeps the SPEC shape', () => {
    expect(errorResponseOf(new KandevError('UNAVAILABLE', 'busy', { retry_after_s: 2.2 }))).toEqual({
      status: 503,
      body: { error: { code: 'UNAVAILABLE', message: 'busy', details: { retry_after_s: 2.2 } } },
      unexpected: false,
      retryAfterS: 3,
    });
    expect(errorResponseOf(new KandevError('CONFLICT', 'x', { retry_after_s: 2 })).retryAfterS).toBeNull();
  });
  it('folds Fastify errors into the closed set', () => {
    expect(errorResponseOf({ code: 'FST_ERR_CTP_INVALID_JSON_BODY', statusCode: 400 }).body.error.code).toBe('BAD_REQUEST');
    expect(errorResponseOf({ code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE', statusCode: 415 })).toMatchObject({
      status: 400,
      body: { error: { code: 'BAD_REQUEST' } },
    });
    expect(errorResponseOf({ code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 }).status).toBe(400);
    expect(errorResponseOf({ validation: [{ message: 'x' }], statusCode: 400 }).body.error.code).toBe('VALIDATION_ERROR');
  });
  it('hides the message of an unexpected error', () => {
    expect(errorResponseOf(new Error('db password is hunter2'))).toEqual({
      status: 500,
      body: { error: { code: 'INTERNAL_ERROR', message: 'internal error' } },
      unexpected: true,
      retryAfterS: null,
    });
  });
});

describe('requestIdFrom', () => {
  it('keeps a sane caller id and replaces anything else with a UUID', () => {
    expect(requestIdFrom('abc-123')).toBe('abc-123');
    expect(requestIdFrom(['first', 'second'])).toBe('first');
    for (const bad of [undefined, '', 'a b', 'x'.repeat(129), 'evil\nline']) expect(requestIdFrom(bad)).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('readinessReport', () => {
  const all = { orchestrator: null, lifecycle: null, holds: null, mcp: null };
  it('is ready only with NATS up, not stopping and every service answering', () => {
    expect(readinessReport({ natsConnected: true, stopping: false, services: all }).ready).toBe(true);
    expect(readinessReport({ natsConnected: false, stopping: false, services: all }).ready).toBe(false);
    expect(readinessReport({ natsConnected: true, stopping: true, services: all }).ready).toBe(false);
    const r = readinessReport({ natsConnected: true, stopping: false, services: { ...all, holds: 'UNAVAILABLE: no responder' } });
    expect(r).toMatchObject({ ready: false, body: { missing: ['holds'], services: { holds: 'UNAVAILABLE: no responder', mcp: 'ok' } } });
  });

  it("carries what the services report about themselves (lifecycle's agent_isolation), and nothing when they report nothing", () => {
    const r = readinessReport({ natsConnected: true, stopping: false, services: all, details: { lifecycle: { agent_isolation: 'same_uid' }, mcp: {} } });
    expect(r.body.details).toEqual({ lifecycle: { agent_isolation: 'same_uid' } });
    expect('details' in readinessReport({ natsConnected: true, stopping: false, services: all }).body).toBe(false);
  });
});

describe('SubscriptionRegistry', () => {
  it('indexes both ways and forgets a closed client entirely', () => {
    const r = new SubscriptionRegistry<string>();
    expect(r.add('c1', 't1')).toBe(true);
    expect(r.add('c1', 't1')).toBe(false);
    r.add('c1', 't2');
    r.add('c2', 't1');
    expect([...r.subscribersOf(['t1'])].sort()).toEqual(['c1', 'c2']);
    expect([...r.subscribersOf(['t1', 't2'])].sort()).toEqual(['c1', 'c2']);
    expect(r.countOf('c1')).toBe(2);
    expect(r.remove('c1', 't1')).toBe(true);
    expect(r.remove('c1', 't1')).toBe(false);
    expect([...r.subscribersOf(['t1'])]).toEqual(['c2']);
    r.removeClient('c1');
    r.removeClient('c2');
    expect(r.taskCount).toBe(0);
    expect(r.countOf('c1')).toBe(0);
    expect(r.subscribersOf(['t1', 't2']).size).toBe(0);
  });
});

describe('JSON depth before parsing (issue 53)', () => {
  it('counts arrays and objects, not brackets inside strings or escaped quotes', () => {
    expect(jsonNestsDeeperThan('{"a":[[1]]}', 3)).toBe(false);
    expect(jsonNestsDeeperThan('{"a":[[[1]]]}', 3)).toBe(true);
    expect(jsonNestsDeeperThan(JSON.stringify({ s: '[[[[[{{{{' }), 1)).toBe(false);
    expect(jsonNestsDeeperThan(JSON.stringify({ s: 'a\\"[[[[' }), 1)).toBe(false);
    expect(jsonNestsDeeperThan('[]'.repeat(1000), 1)).toBe(false);
    expect(jsonNestsDeeperThan('['.repeat(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)).toBe(true);
  });
  it('a frame nested too deep is BAD_REQUEST, answering its id and action; an mcp.* one is FORBIDDEN however deep', () => {
    const deep = `${'['.repeat(5000)}${']'.repeat(5000)}`;
    const parsed = parseClientFrame(`{"id":"1","type":"request","action":"task.stop","payload":${deep}}`);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) {
      expect(parsed.error).toMatchObject({ id: '1', action: 'task.stop' });
      expect(parsed.error.payload).toMatchObject({ code: 'BAD_REQUEST', details: { max_depth: MAX_JSON_DEPTH } });
    }
    const mcp = parseClientFrame(`{"id":"2","type":"request","action":"mcp.stop_task","payload":${deep}}`);
    expect(mcp).toMatchObject({ ok: false, error: { action: 'mcp.stop_task', payload: { code: 'FORBIDDEN' } } });
  });
});

describe('header values (issue 53)', () => {
  const latin1 = (bytes: number[]) => Buffer.from(bytes).toString('latin1');
  it('decodes UTF-8 from the latin1 Node hands over; refuses what is not UTF-8 or holds control characters', () => {
    expect(headerText('plain-key')).toBe('plain-key');
    expect(headerText(Buffer.from('clé', 'utf8').toString('latin1'))).toBe('clé');
    expect(headerText(latin1([0x6b, 0xff]))).toBeNull();
    expect(headerText(latin1([0xed, 0xa0, 0x80]))).toBeNull();
    expect(headerText('a\u0000b')).toBeNull();
    expect(headerText('a\tb')).toBe('a\tb');
    expect(invalidHeader({ a: 'x', b: ['y', latin1([0xc3])] })).toBe('b');
    expect(invalidHeader({ a: 'x', b: undefined })).toBeNull();
  });
});

describe('inbox.changed (R-12.2)', () => {
  const ev = (type: string, data: Record<string, unknown>): EventEnvelope =>
    ({ id: 'e1', type, workspace_id: 'w', task_id: 't', session_id: 's', occurred_at: 'now', data }) as unknown as EventEnvelope;
  it('is derived from the four events that open or close an inbox item, and from nothing else', () => {
    expect(inboxChangeOf(ev('clarification.requested', { bundle: { id: 'b1' } }))?.payload).toMatchObject({
      kind: 'clarification',
      id: 'b1',
      change: 'opened',
      workspace_id: 'w',
    });
    expect(inboxChangeOf(ev('clarification.closed', { bundle: { id: 'b1' } }))?.payload).toMatchObject({ change: 'closed' });
    expect(inboxChangeOf(ev('permission.requested', { permission: { id: 'p1' } }))).toMatchObject({
      action: 'inbox.changed',
      payload: { kind: 'permission', id: 'p1', change: 'opened' },
    });
    expect(inboxChangeOf(ev('permission.closed', { id: 'p2' }))?.payload).toMatchObject({ id: 'p2', change: 'closed' });
    expect(inboxChangeOf(ev('task.state_changed', {}))).toBeNull();
  });
});

describe('OpenAPI helpers (R-12.3)', () => {
  it('drops what the gateway fills in, in every branch of a union', () => {
    const s = {
      anyOf: [
        { type: 'object', properties: { actor: {}, a: {} }, required: ['actor', 'a'] },
        { type: 'object', properties: { actor: {} }, required: ['actor'] },
      ],
    };
    expect(withoutFields(s, ['actor'])).toEqual({
      anyOf: [
        { type: 'object', properties: { a: {} }, required: ['a'] },
        { type: 'object', properties: {} },
      ],
    });
  });
});
