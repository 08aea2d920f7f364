import { OrchMcp } from '@kandev/contracts';
import { initTracing } from '@kandev/runtime';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { agentToken, connectClient, Harness, uuid } from './harness.js';

type Exporter = NonNullable<Parameters<typeof initTracing>[0]['exporter']>;
type Finished = Parameters<Exporter['export']>[0][number];

// Registered before the service starts, so its initTracing() reuses this provider.
const finished: Finished[] = [];
const exporter: Exporter = {
  export: (spans, done) => {
    finished.push(...spans);
    done({ code: 0 });
  },
  shutdown: async () => undefined,
};
initTracing({ serviceName: 'mcp-trace-test', exporter });

let h: Harness;
let client: Client;
const traceId = 'a3ce929d0e0e47364bf92f3577b34da6';
const edgeSpanId = '00f067aa0ba902b7';

beforeAll(async () => {
  h = await Harness.start();
  client = await connectClient(h.url, await agentToken({ task_id: uuid() }), { traceparent: `00-${traceId}-${edgeSpanId}-01` });
});
afterAll(async () => {
  await client?.close();
  await h?.stop();
});

it('runs the tool call as a child of the incoming traceparent, with the NATS request under it (R-7.2)', async () => {
  h.handlers.stopChildTask = async (req) => ({ task_id: req.task_id, status: 'stopped' });
  await client.callTool({ name: 'stop_task_kandev', arguments: { task_id: uuid() } });
  await new Promise((r) => setTimeout(r, 50));

  const byName = (n: string) => finished.find((s) => s.name === n);
  const tool = byName('mcp tool stop_task_kandev');
  const send = byName(`send ${OrchMcp.stopChildTask.subject}`);
  const process = byName(`process ${OrchMcp.stopChildTask.subject}`);
  expect(tool, 'tool span').toBeDefined();
  expect(send, 'send span').toBeDefined();
  expect(process, 'process span').toBeDefined();

  expect(tool!.kind).toBe(1); // SpanKind.SERVER
  expect(tool!.spanContext().traceId).toBe(traceId);
  expect(tool!.parentSpanContext?.spanId).toBe(edgeSpanId);
  expect(tool!.attributes['mcp.tool.name']).toBe('stop_task_kandev');
  expect(send!.spanContext().traceId).toBe(traceId);
  expect(send!.parentSpanContext?.spanId).toBe(tool!.spanContext().spanId);
  expect(process!.parentSpanContext?.spanId).toBe(send!.spanContext().spanId);
});

it('marks an error result on the tool span', async () => {
  finished.length = 0;
  const r = await client.callTool({ name: 'stop_task_kandev', arguments: {} });
  expect(r.isError).toBe(true);
  await new Promise((r) => setTimeout(r, 50));
  const tool = finished.find((s) => s.name === 'mcp tool stop_task_kandev');
  expect(tool?.attributes['kandev.error_code']).toBe('VALIDATION_ERROR');
});
