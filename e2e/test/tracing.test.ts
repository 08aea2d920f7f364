import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { connectMcp, eventually } from '@kandev/testkit';
import {
  ATTR_DB_SYSTEM_NAME,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_HTTP_ROUTE,
  ATTR_MCP_METHOD_NAME,
  ATTR_MESSAGING_SYSTEM,
  ATTR_MESSAGING_SYSTEM_NAME,
  ATTR_SERVICE_INSTANCE_ID,
  ATTR_SERVICE_VERSION,
} from '@kandev/runtime';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * one trace shows an MCP stop from the tool call to the signal agentctl sends the agent.
 * Every process (services and agentctl) exports OTLP/HTTP JSON to a collector of this test's own.
 * Span names and attributes follow the OTel semantic conventions (docs/operations.md, "Traces"),
 * and every process describes itself in its resource (service.version, service.instance.id, and
 * what OTEL_RESOURCE_ATTRIBUTES adds).
 */
interface CollectedSpan {
  service: string;
  resource: Record<string, unknown>;
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  attributes: Record<string, unknown>;
  events: Array<{ name: string; attributes: Record<string, unknown> }>;
}
type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean };
type OtlpAttr = { key: string; value: OtlpValue };
const valuesOf = (attrs: OtlpAttr[] | undefined): Record<string, unknown> =>
  Object.fromEntries((attrs ?? []).map((a) => [a.key, a.value.stringValue ?? a.value.intValue ?? a.value.boolValue]));
/** Given to every process through the environment: it must reach every exported span's resource. */
const DEPLOYMENT = 'e2e-tracing';

const spans: CollectedSpan[] = [];
let collector: Server;
let w: World;

beforeAll(async () => {
  collector = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          resourceSpans: Array<{
            resource: { attributes: OtlpAttr[] };
            scopeSpans: Array<{
              spans: Array<{
                traceId: string;
                spanId: string;
                parentSpanId?: string;
                name: string;
                attributes?: OtlpAttr[];
                events?: Array<{ name: string; attributes?: OtlpAttr[] }>;
              }>;
            }>;
          }>;
        };
        for (const rs of body.resourceSpans ?? []) {
          const resource = valuesOf(rs.resource.attributes);
          const service = String(resource['service.name'] ?? '?');
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              spans.push({
                service,
                resource,
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId || undefined,
                name: s.name,
                attributes: valuesOf(s.attributes),
                events: (s.events ?? []).map((e) => ({ name: e.name, attributes: valuesOf(e.attributes) })),
              });
        }
      } catch {
        /* not JSON: ignore */
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
  w = await startWorld({
    OTEL_EXPORTER_OTLP_ENDPOINT: url,
    // The SDK's default protocol is http/protobuf; this collector reads JSON.
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    OTEL_RESOURCE_ATTRIBUTES: `deployment.environment.name=${DEPLOYMENT}`,
  });
});
afterAll(async () => {
  await w?.stop();
  await new Promise((r) => collector?.close(r));
});

it('links the MCP tool call, the orchestrator, the lifecycle and agentctl signalling the agent in one trace', async () => {
  const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
  const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker' });
  const session = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: sleepScript(60_000) });
  await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.status === 'RUNNING');
  const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(parent.id));
  expect((await mcp.callJson('stop_task_kandev', { task_id: child.id })).json.status).toBe('stopped');

  const tool = await eventually(async () => spans.find((s) => s.service === 'kandev-mcp' && s.name === 'tools/call stop_task_kandev'), 15_000);
  // The MCP client sent no traceparent: the trace starts at mcp's HTTP server span, the tool call's parent.
  const http = await eventually(async () => spans.find((s) => s.spanId === tool.parentSpanId), 15_000);
  // Spans arrive as each process exports them; parents end (and export) after their children, so
  // wait until the signal is there and the tree has closed up to the HTTP span.
  const connected = (t: CollectedSpan[]) => {
    const ids = new Set(t.map((s) => s.spanId));
    return t.every((s) => s === http || ids.has(s.parentSpanId!));
  };
  // agentctl exports its span as it ends, at the agents' CPU priority once it is being stopped
  // (ADR 0043): on a saturated machine that took over 15 s once, so the wait is a minute.
  const trace = await eventually(async () => {
    const t = spans.filter((s) => s.traceId === tool.traceId);
    return t.some((s) => s.service === 'kandev-agentctl' && s.events.some((e) => e.name === 'signal')) && connected(t) ? t : null;
  }, 60_000).catch(() => spans.filter((s) => s.traceId === tool.traceId));
  expect(new Set(trace.map((s) => s.service))).toEqual(new Set(['kandev-mcp', 'kandev-orchestrator', 'kandev-lifecycle', 'kandev-agentctl']));
  const signal = trace.flatMap((s) => s.events).find((e) => e.name === 'signal')!;
  expect(signal.attributes.signal).toBe('SIGTERM');
  // Every span but the HTTP request's has its parent in the same trace: one connected tree, no gaps.
  expect(http.parentSpanId).toBeUndefined();
  const ids = new Set(trace.map((s) => s.spanId));
  for (const s of trace) if (s !== http) expect(ids.has(s.parentSpanId!), `${s.service} ${s.name} has no parent in the trace`).toBe(true);
  // Span names are templates, never ids.
  for (const s of trace) expect(s.name).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}-/);

  // HTTP server span of mcp: `POST /mcp`, with its route.
  expect(http.name).toBe('POST /mcp');
  expect(http.attributes[ATTR_HTTP_ROUTE]).toBe('/mcp');
  // The MCP tool call: the method and the tool's name.
  expect(tool.attributes[ATTR_MCP_METHOD_NAME]).toBe('tools/call');
  expect(tool.attributes[ATTR_GEN_AI_TOOL_NAME]).toBe('stop_task_kandev');
  // NATS hops: `send` from mcp, `process` in the orchestrator, messaging.system(.name) nats.
  const send = trace.find((s) => s.service === 'kandev-mcp' && s.name === 'send kandev.orch.mcp.stop_child_task');
  const process = trace.find((s) => s.service === 'kandev-orchestrator' && s.name === 'process kandev.orch.mcp.stop_child_task');
  expect(send?.parentSpanId).toBe(tool.spanId);
  expect(process?.parentSpanId).toBe(send?.spanId);
  for (const s of [send!, process!]) {
    expect(s.attributes[ATTR_MESSAGING_SYSTEM]).toBe('nats');
    expect(s.attributes[ATTR_MESSAGING_SYSTEM_NAME]).toBe('nats');
  }
  // The stop's statements in PostgreSQL, under the orchestrator's handling of the request.
  const statements = trace.filter((s) => s.service === 'kandev-orchestrator' && s.attributes[ATTR_DB_SYSTEM_NAME] === 'postgresql');
  expect(statements.length, 'database spans of the stop').toBeGreaterThan(0);
  for (const s of statements) expect(s.name).toMatch(/^[A-Z]+( [a-z_.]+)?$/); // `UPDATE sessions`: a summary, no statement text

  // The resource: the package version, the instance (INSTANCE_ID; agentctl: its execution), and
  // what OTEL_RESOURCE_ATTRIBUTES gave every process.
  const version = (pkg: string) => (JSON.parse(readFileSync(new URL(`../../${pkg}/package.json`, import.meta.url), 'utf8')) as { version: string }).version;
  const expected: Record<string, { version: string; instance: string | RegExp }> = {
    'kandev-mcp': { version: version('services/mcp'), instance: 'mcp-1' },
    'kandev-orchestrator': { version: version('services/orchestrator'), instance: 'orchestrator-1' },
    'kandev-lifecycle': { version: version('services/lifecycle'), instance: 'lifecycle-1' },
    'kandev-agentctl': { version: version('packages/agentctl'), instance: /^[0-9a-f]{8}-[0-9a-f]{4}-/ },
  };
  for (const s of trace) {
    const want = expected[s.service]!;
    expect(s.resource[ATTR_SERVICE_VERSION], `${s.service} service.version`).toBe(want.version);
    if (typeof want.instance === 'string') expect(s.resource[ATTR_SERVICE_INSTANCE_ID], `${s.service} service.instance.id`).toBe(want.instance);
    else expect(String(s.resource[ATTR_SERVICE_INSTANCE_ID]), `${s.service} service.instance.id`).toMatch(want.instance);
    expect(s.resource['deployment.environment.name'], `${s.service} resource from OTEL_RESOURCE_ATTRIBUTES`).toBe(DEPLOYMENT);
  }
  await mcp.close();
});
