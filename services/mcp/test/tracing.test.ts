import { randomBytes } from 'node:crypto';
import { OrchMcp } from '@kandev/contracts';
import {
  ATTR_ERROR_TYPE,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_MCP_METHOD_NAME,
  initTracing,
  shutdownTracing,
} from '@kandev/runtime';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { eventually } from '@kandev/testkit';
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
// A file run before this one in the same worker (isolate: false) may have left its provider.
await shutdownTracing();
await initTracing({ serviceName: 'mcp-trace-test', exporter });

let h: Harness;
const clients: Client[] = [];
const edgeSpanId = '00f067aa0ba902b7';
/** A client whose requests carry a traceparent of their own, so each test reads only its spans. */
async function tracedClient(): Promise<{ client: Client; traceId: string }> {
  const traceId = randomBytes(16).toString('hex');
  const client = await connectClient(h.url, await agentToken({ task_id: uuid() }), { traceparent: `00-${traceId}-${edgeSpanId}-01` });
  clients.push(client);
  return { client, traceId };
}

beforeAll(async () => {
  h = await Harness.start();
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await h?.stop();
});

it('runs the tool call as a child of the incoming traceparent, with the NATS request under it (R-7.2)', async () => {
  const { client, traceId } = await tracedClient();
  h.handlers.stopChildTask = async (req) => ({ task_id: req.task_id, status: 'stopped' });
  await client.callTool({ name: 'stop_task_kandev', arguments: { task_id: uuid() } });
  const ours = () => finished.filter((s) => s.spanContext().traceId === traceId);
  const byName = (n: string) => ours().find((s) => s.name === n);
  // The HTTP span ends when its response is closed, a moment after the client has the answer.
  const toolSpan = await eventually(async () => byName('tools/call stop_task_kandev'), 5_000, 10);
  await eventually(async () => ours().some((s) => s.name === 'POST /mcp' && s.spanContext().spanId === toolSpan.parentSpanContext?.spanId), 5_000, 10);

  const tool = byName('tools/call stop_task_kandev');
  const http = ours().find((s) => s.name === 'POST /mcp' && s.spanContext().spanId === tool?.parentSpanContext?.spanId);
  const send = byName(`send ${OrchMcp.stopChildTask.subject}`);
  const process = byName(`process ${OrchMcp.stopChildTask.subject}`);
  expect(http, 'HTTP server span').toBeDefined();
  expect(tool, 'tool span').toBeDefined();
  expect(send, 'send span').toBeDefined();
  expect(process, 'process span').toBeDefined();

  // The HTTP server span continues the caller's traceparent; the tool call is its child.
  expect(http!.kind).toBe(1); // SpanKind.SERVER
  expect(http!.spanContext().traceId).toBe(traceId);
  expect(http!.parentSpanContext?.spanId).toBe(edgeSpanId);
  expect(http!.attributes[ATTR_HTTP_ROUTE]).toBe('/mcp');
  expect(http!.attributes[ATTR_HTTP_REQUEST_METHOD]).toBe('POST');
  expect(http!.attributes[ATTR_HTTP_RESPONSE_STATUS_CODE]).toBe(200);
  expect(tool!.kind).toBe(1); // SpanKind.SERVER
  expect(tool!.spanContext().traceId).toBe(traceId);
  expect(tool!.parentSpanContext?.spanId).toBe(http!.spanContext().spanId);
  // The MCP conventions: the method, and the tool as gen_ai.tool.name.
  expect(tool!.attributes[ATTR_MCP_METHOD_NAME]).toBe('tools/call');
  expect(tool!.attributes[ATTR_GEN_AI_TOOL_NAME]).toBe('stop_task_kandev');
  expect(tool!.attributes[ATTR_GEN_AI_OPERATION_NAME]).toBe('execute_tool');
  expect(send!.spanContext().traceId).toBe(traceId);
  expect(send!.parentSpanContext?.spanId).toBe(tool!.spanContext().spanId);
  expect(process!.parentSpanContext?.spanId).toBe(send!.spanContext().spanId);
});

it('marks an error result on the tool span', async () => {
  const { client, traceId } = await tracedClient();
  const r = await client.callTool({ name: 'stop_task_kandev', arguments: {} });
  expect(r.isError).toBe(true);
  const tool = await eventually(async () => finished.find((s) => s.name === 'tools/call stop_task_kandev' && s.spanContext().traceId === traceId), 5_000, 10);
  expect(tool?.attributes['kandev.error_code']).toBe('VALIDATION_ERROR');
  expect(tool?.attributes[ATTR_ERROR_TYPE]).toBe('VALIDATION_ERROR');
});
