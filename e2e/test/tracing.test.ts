import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { connectMcp, eventually } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * one trace shows an MCP stop from the tool call to the signal agentctl sends the agent.
 * Every process (services and agentctl) exports OTLP/HTTP JSON to a collector of this test's own.
 */
interface CollectedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  events: Array<{ name: string; attributes: Record<string, unknown> }>;
}
type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean };
type OtlpAttr = { key: string; value: OtlpValue };

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
          resourceSpans: Array<{ resource: { attributes: OtlpAttr[] }; scopeSpans: Array<{ spans: Array<{ traceId: string; spanId: string; parentSpanId?: string; name: string; events?: Array<{ name: string; attributes?: OtlpAttr[] }> }> }> }>;
        };
        for (const rs of body.resourceSpans ?? []) {
          const service = rs.resource.attributes.find((a) => a.key === 'service.name')?.value.stringValue ?? '?';
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              spans.push({
                service,
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId || undefined,
                name: s.name,
                events: (s.events ?? []).map((e) => ({ name: e.name, attributes: Object.fromEntries((e.attributes ?? []).map((a) => [a.key, a.value.stringValue ?? a.value.intValue ?? a.value.boolValue])) })),
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
  w = await startWorld({ OTEL_EXPORTER_OTLP_ENDPOINT: url, OTEL_BSP_SCHEDULE_DELAY: '100' });
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

  const tool = await eventually(async () => spans.find((s) => s.service === 'kandev-mcp' && s.name === 'mcp tool stop_task_kandev'), 15_000);
  // Spans arrive as each process exports them; parents end (and export) after their children, so
  // wait until the signal is there and the tree has closed up to the tool call.
  const connected = (t: CollectedSpan[]) => {
    const ids = new Set(t.map((s) => s.spanId));
    return t.every((s) => s === tool || ids.has(s.parentSpanId!));
  };
  const trace = await eventually(async () => {
    const t = spans.filter((s) => s.traceId === tool.traceId);
    return t.some((s) => s.service === 'kandev-agentctl' && s.events.some((e) => e.name === 'signal')) && connected(t) ? t : null;
  }, 15_000).catch(() => spans.filter((s) => s.traceId === tool.traceId));
  expect(new Set(trace.map((s) => s.service))).toEqual(new Set(['kandev-mcp', 'kandev-orchestrator', 'kandev-lifecycle', 'kandev-agentctl']));
  const signal = trace.flatMap((s) => s.events).find((e) => e.name === 'signal')!;
  expect(signal.attributes.signal).toBe('SIGTERM');
  // Every span but the tool call has its parent in the same trace: one connected tree, no gaps.
  const ids = new Set(trace.map((s) => s.spanId));
  for (const s of trace) if (s !== tool) expect(ids.has(s.parentSpanId!), `${s.service} ${s.name} has no parent in the trace`).toBe(true);
  // Span names are templates, never ids.
  for (const s of trace) expect(s.name).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}-/);
  await mcp.close();
});
