import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, metricSample, scrapeMetrics } from '@kandev/testkit';
import { agentToken, connectClient, fakeTask, Harness, uuid } from './harness.js';

/**
 * mcp's metrics on its own /metrics, on a real nats-server with the orchestrator faked: `/mcp` under
 * OpenTelemetry's HTTP metric, and the in-flight gauges while a tool call is held open (the fake
 * orchestrator answers only when the test lets it).
 */
let h: Harness;
let client: Client;
beforeAll(async () => {
  h = await Harness.start();
  client = await connectClient(h.url, await agentToken({ task_id: uuid(), mode: 'task' }));
});
afterAll(async () => {
  await client?.close().catch(() => undefined);
  await h?.stop();
});

const page = () => scrapeMetrics(h.mcp.healthUrl);
const value = async (name: string, labels: Record<string, string> = {}) => metricSample(await page(), name, labels) ?? 0;

describe('mcp metrics', () => {
  it('counts a tool call and its HTTP request as in flight until it is answered, and observes POST /mcp', async () => {
    const ok = { http_route: '/mcp', http_request_method: 'POST', http_response_status_code: '200' };
    const before = {
      calls: await value('kandev_mcp_tool_calls_in_flight'),
      requests: await value('kandev_mcp_requests_in_flight'),
      posts: await value('http_server_request_duration_seconds_count', ok),
    };
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    h.handlers.whoami = async (req) => {
      await answered;
      return fakeTask({ id: req.caller_task_id });
    };
    const call = client.callTool({ name: 'whoami_kandev', arguments: {} });
    await eventually(async () => ((await value('kandev_mcp_tool_calls_in_flight')) === before.calls + 1 ? true : null), 5_000, 10);
    expect(await value('kandev_mcp_requests_in_flight')).toBe(before.requests + 1);
    answer();
    expect((await call).isError).toBeFalsy();
    await eventually(async () => ((await value('kandev_mcp_requests_in_flight')) === before.requests ? true : null), 5_000, 10);
    expect(await value('kandev_mcp_tool_calls_in_flight')).toBe(before.calls);
    expect(await value('http_server_request_duration_seconds_count', ok)).toBeGreaterThan(before.posts);
  });

  it('observes a refused request under its status code', async () => {
    const refused = { http_route: '/mcp', http_request_method: 'POST', http_response_status_code: '401' };
    const before = await value('http_server_request_duration_seconds_count', refused);
    const res = await fetch(h.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: '{}',
    });
    expect(res.status).toBe(401);
    await eventually(async () => ((await value('http_server_request_duration_seconds_count', refused)) === before + 1 ? true : null), 5_000, 10);
  });
});
