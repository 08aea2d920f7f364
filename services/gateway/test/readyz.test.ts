import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pingEndpoint } from '@kandev/contracts';
import { connectNats, createLogger, on, serveEndpoints, type NatsConnection, type RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { operatorToken, startGateway } from './helpers.js';

let nats: TestNats;
let nc: NatsConnection;
let gw: { running: RunningService; http: string };

beforeAll(async () => {
  nats = await startNats();
  gw = await startGateway(nats.url);
  nc = await connectNats({ url: nats.url, name: 'gateway-readyz-test' });
});
afterAll(async () => {
  await gw?.running.stop();
  await nc?.close();
  await nats?.stop();
});

const fakePing = (service: string) =>
  serveEndpoints(nc, { service, instanceId: `fake-${service}`, queue: service, log: createLogger('fake', 'silent') }, [
    on(pingEndpoint(service), async () => ({ service, instance_id: `fake-${service}` })),
  ]);

describe('with no other service running', () => {
  it('is alive: /healthz answers 200 without a token', async () => {
    const res = await fetch(`${gw.http}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });

  it('answers an API call with 503 UNAVAILABLE when no orchestrator answers', async () => {
    const res = await fetch(`${gw.http}/tasks/${randomUUID()}`, { headers: { authorization: `Bearer ${await operatorToken()}` } });
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ error: { code: 'UNAVAILABLE', message: expect.any(String) } });
  });

  it('serves Prometheus metrics without a token', async () => {
    const res = await fetch(`${gw.http}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/text\/plain/);
    expect(await res.text()).toMatch(/^# HELP /m);
  });

  it('redirects / to /ui/ and serves the console there without a token', async () => {
    const root = await fetch(`${gw.http}/`, { redirect: 'manual' });
    expect(root.status).toBe(302);
    expect(root.headers.get('location')).toBe('/ui/');
    const ui = await fetch(`${gw.http}/ui/`);
    expect(ui.status).toBe(200);
    expect(ui.headers.get('content-type')).toMatch(/text\/html/);
    expect(await ui.text()).toMatch(/console/i);
    const missing = await fetch(`${gw.http}/ui/nope.js`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe('NOT_FOUND');
  });
});

describe('/readyz', () => {
  it('is 503 naming the missing services until all four answer their ping, then 200', async () => {
    let res = await fetch(`${gw.http}/readyz`);
    expect(res.status).toBe(503);
    type Readyz = { missing: string[]; services: Record<string, string> };
    let body = (await res.json()) as Readyz;
    expect(body).toMatchObject({ status: 'not_ready', nats: 'ok', missing: ['orchestrator', 'lifecycle', 'holds', 'mcp'] });
    expect(body.services.orchestrator).toMatch(/^UNAVAILABLE/);

    await fakePing('orchestrator');
    await fakePing('lifecycle');
    await fakePing('holds');
    res = await fetch(`${gw.http}/readyz`);
    expect(res.status).toBe(503);
    body = (await res.json()) as Readyz;
    expect(body.missing).toEqual(['mcp']);
    expect(body.services).toMatchObject({ orchestrator: 'ok', lifecycle: 'ok', holds: 'ok' });

    await fakePing('mcp');
    res = await fetch(`${gw.http}/readyz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      status: 'ready',
      nats: 'ok',
      stopping: false,
      services: { orchestrator: 'ok', lifecycle: 'ok', holds: 'ok', mcp: 'ok' },
      missing: [],
    });
  });
});

describe('without a console directory', () => {
  let bare: { running: RunningService; http: string };
  beforeAll(async () => {
    bare = await startGateway(nats.url, { CONSOLE_DIR: '/nonexistent/kandev-console' });
  });
  afterAll(async () => {
    await bare?.running.stop();
  });

  it('answers /ui/ with NOT_FOUND and still redirects /', async () => {
    const ui = await fetch(`${bare.http}/ui/`);
    expect(ui.status).toBe(404);
    expect(((await ui.json()) as { error: unknown }).error).toEqual({ code: 'NOT_FOUND', message: expect.stringContaining('CONSOLE_DIR') });
    expect((await fetch(`${bare.http}/`, { redirect: 'manual' })).status).toBe(302);
  });
});
