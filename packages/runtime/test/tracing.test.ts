import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import type { Endpoint } from '@kandev/contracts';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, createLogger, initTracing, on, request, serveEndpoints, type NatsConnection } from '../src/index.js';

const exporter = new InMemorySpanExporter();
initTracing({ serviceName: 'trace-test', exporter });

const first: Endpoint = { name: 'test.first', subject: 'kandev.test.first', request: z.object({}), result: z.object({ ok: z.boolean() }) };
const second: Endpoint = { name: 'test.second', subject: 'kandev.test.second', request: z.object({}), result: z.object({ ok: z.boolean() }) };

let nats: TestNats;
let nc: NatsConnection;
beforeAll(async () => {
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: 'trace-test' });
  const log = createLogger('test', 'silent');
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'a', queue: 'q', log }, [
    // The first hop calls the second: the context must follow through the NATS headers.
    on(first, async () => request(nc, second, {})),
    on(second, async () => ({ ok: true })),
  ]);
});
afterAll(async () => {
  await nc?.close();
  await nats?.stop();
});

it('carries W3C trace context across two NATS hops', async () => {
  exporter.reset();
  await request(nc, first, {});
  await new Promise((r) => setTimeout(r, 50));
  const spans = exporter.getFinishedSpans();
  const byName = (n: string) => spans.find((s) => s.name === n)!;
  const send1 = byName('send kandev.test.first');
  const proc1 = byName('process kandev.test.first');
  const send2 = byName('send kandev.test.second');
  const proc2 = byName('process kandev.test.second');
  for (const s of [send1, proc1, send2, proc2]) expect(s, 'span missing').toBeDefined();
  const traceId = send1.spanContext().traceId;
  for (const s of [proc1, send2, proc2]) expect(s.spanContext().traceId).toBe(traceId);
  expect(proc1.parentSpanContext?.spanId).toBe(send1.spanContext().spanId);
  expect(send2.parentSpanContext?.spanId).toBe(proc1.spanContext().spanId);
  expect(proc2.parentSpanContext?.spanId).toBe(send2.spanContext().spanId);
});
