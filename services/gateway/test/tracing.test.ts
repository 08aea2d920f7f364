import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_MESSAGING_DESTINATION_NAME,
  ATTR_MESSAGING_OPERATION_TYPE,
  ATTR_MESSAGING_SYSTEM_NAME,
  ATTR_URL_PATH,
} from '@kandev/runtime';
import { Orch } from '@kandev/contracts';
import {
  connectNats,
  createLogger,
  initTracing,
  on,
  shutdownTracing,
  serveEndpoints,
  SpanKind,
  type NatsConnection,
  type RunningService,
} from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { fixtures, operatorToken, startGateway, WsTestClient } from './helpers.js';

// Registered before the gateway starts, so startService reuses this provider.
const exporter = new InMemorySpanExporter();
// A file run before this one in the same worker (isolate: false) may have left its provider.
await shutdownTracing();
await initTracing({ serviceName: 'gateway-trace-test', exporter });

const WS1 = randomUUID();
let nats: TestNats;
let nc: NatsConnection;
let gw: { running: RunningService; http: string; ws: string };
let token: string;

beforeAll(async () => {
  nats = await startNats();
  gw = await startGateway(nats.url);
  nc = await connectNats({ url: nats.url, name: 'gateway-trace-test' });
  token = await operatorToken();
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake', queue: 'orchestrator', log: createLogger('fake', 'silent') }, [
    on(Orch.taskGet, async (req) => ({ ...fixtures.task(req.task_id, WS1), sessions: [], hold: null })),
    on(Orch.agentCancel, async (req) => ({ success: true as const, session_id: req.session_id })),
  ]);
});
afterAll(async () => {
  await gw?.running.stop();
  await nc?.close();
  await nats?.stop();
});

async function spanNamed(name: string, traceId?: string): Promise<ReadableSpan> {
  for (let i = 0; i < 50; i++) {
    const s = exporter.getFinishedSpans().find((x) => x.name === name && (!traceId || x.spanContext().traceId === traceId));
    if (s) return s;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(
    `no span ${name}; have ${exporter
      .getFinishedSpans()
      .map((s) => s.name)
      .join(', ')}`,
  );
}
const parentIdOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

it('opens one server span per request named by route template, continuing the incoming trace through NATS', async () => {
  const traceId = 'aaaabbbbccccddddeeeeffff00001111';
  const res = await fetch(`${gw.http}/tasks/${randomUUID()}`, {
    headers: { authorization: `Bearer ${token}`, traceparent: `00-${traceId}-1111222233334444-01` },
  });
  expect(res.status).toBe(200);
  const http = await spanNamed('GET /tasks/:id', traceId);
  expect(http.kind).toBe(SpanKind.SERVER);
  expect(http.attributes[ATTR_HTTP_RESPONSE_STATUS_CODE]).toBe(200);
  // The HTTP server conventions: method, route template, the path as requested.
  expect(http.attributes[ATTR_HTTP_REQUEST_METHOD]).toBe('GET');
  expect(http.attributes[ATTR_HTTP_ROUTE]).toBe('/tasks/:id');
  expect(http.attributes[ATTR_URL_PATH]).toMatch(/^\/tasks\/[0-9a-f-]{36}$/);
  expect(parentIdOf(http)).toBe('1111222233334444');
  const send = await spanNamed('send kandev.orch.task.get', traceId);
  expect(parentIdOf(send)).toBe(http.spanContext().spanId);
  expect(send.kind).toBe(SpanKind.CLIENT);
  expect(send.attributes[ATTR_MESSAGING_SYSTEM_NAME]).toBe('nats');
  expect(send.attributes[ATTR_MESSAGING_OPERATION_TYPE]).toBe('send');
  expect(send.attributes[ATTR_MESSAGING_DESTINATION_NAME]).toBe('kandev.orch.task.get');
  const process = await spanNamed('process kandev.orch.task.get', traceId);
  expect(process.attributes[ATTR_MESSAGING_OPERATION_TYPE]).toBe('process');
});

it('traces refused requests too, and never puts ids in span names', async () => {
  const res = await fetch(`${gw.http}/tasks/${randomUUID()}/stop`, { method: 'POST' });
  expect(res.status).toBe(401);
  const span = await spanNamed('POST /tasks/:id/stop');
  expect(span.attributes['kandev.error_code']).toBe('UNAUTHORIZED');
  for (const s of exporter.getFinishedSpans()) expect(s.name).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}/);
});

it('opens a span per WebSocket request, named by action', async () => {
  const c = await WsTestClient.open(gw.ws, { authorization: `Bearer ${token}` });
  await c.call('agent.cancel', { session_id: randomUUID() });
  const span = await spanNamed('WS agent.cancel');
  expect(span.kind).toBe(SpanKind.SERVER);
  const send = await spanNamed('send kandev.orch.agent.cancel', span.spanContext().traceId);
  expect(parentIdOf(send)).toBe(span.spanContext().spanId);
  await c.close();
});
