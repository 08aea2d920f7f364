import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, metricSample, startNats, type TestNats } from '@kandev/testkit';
import { operatorToken, startGateway, WsTestClient } from './helpers.js';

/**
 * The gateway's HTTP metric under OpenTelemetry's names (route template, method, status code) and
 * its /ws connection gauge, read from its own /metrics on a real nats-server (no orchestrator
 * answers, so an API call is a 503).
 */
let nats: TestNats;
let gw: Awaited<ReturnType<typeof startGateway>>;
beforeAll(async () => {
  nats = await startNats();
  gw = await startGateway(nats.url);
});
afterAll(async () => {
  await gw?.running.stop();
  await nats?.stop();
});

const page = async () => (await fetch(`${gw.http}/metrics`)).text();

describe('gateway metrics', () => {
  it('observes an API request by route template, method and status code, never by raw path', async () => {
    const labels = { http_route: '/tasks/:id', http_request_method: 'GET', http_response_status_code: '503' };
    const before = metricSample(await page(), 'http_server_request_duration_seconds_count', labels) ?? 0;
    const id = randomUUID();
    const res = await fetch(`${gw.http}/tasks/${id}`, { headers: { authorization: `Bearer ${await operatorToken()}` } });
    expect(res.status).toBe(503);
    const after = await page();
    expect(metricSample(after, 'http_server_request_duration_seconds_count', labels)).toBe(before + 1);
    expect(after).not.toContain(id);
    // The old route/method/code series is gone (docs/operations.md, Metrics: changed).
    expect(after).not.toContain('kandev_http_request_duration_seconds');
  });

  it('counts open /ws connections, down again when they close', async () => {
    const token = await operatorToken();
    const before = metricSample(await page(), 'kandev_ws_connections') ?? 0;
    const a = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    const b = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
    await eventually(async () => (metricSample(await page(), 'kandev_ws_connections') === before + 2 ? true : null), 5_000, 10);
    await a.close();
    await eventually(async () => (metricSample(await page(), 'kandev_ws_connections') === before + 1 ? true : null), 5_000, 10);
    await b.close();
    await eventually(async () => (metricSample(await page(), 'kandev_ws_connections') === before ? true : null), 5_000, 10);
  });
});
