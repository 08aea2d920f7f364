import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { context, propagation, trace, TraceFlags } from '@opentelemetry/api';
import { inSpan, initTracing, PropagatingTracerProvider, shutdownTracing, traceHeaders, tracer } from '../src/tracing.js';

// A process with nowhere to export: its spans record nothing, but trace context still crosses hops
// (a downstream service that exports records its part) and reaches the log lines.
// The worker may have run another file first (isolate: false): start from no provider at all.
let provider: Awaited<ReturnType<typeof initTracing>>;
beforeAll(async () => {
  await shutdownTracing();
  provider = await initTracing({ serviceName: 'propagating-test' });
});
afterAll(() => shutdownTracing());

const parse = (traceparent: string) => {
  const [, traceId, spanId, flags] = traceparent.split('-');
  return { traceId: traceId!, spanId: spanId!, flags: flags! };
};

describe('tracing with no exporter', () => {
  it('records nothing: the provider is the propagating one and its spans are not recording', () => {
    expect(provider).toBeInstanceOf(PropagatingTracerProvider);
    const span = tracer().startSpan('x');
    expect(span.isRecording()).toBe(false);
    expect(trace.isSpanContextValid(span.spanContext())).toBe(true);
  });

  it('a root span starts a sampled trace; a child continues it with a span id of its own, across an async hop', async () => {
    const seen = await inSpan('root', {}, async (root) => {
      const rootCtx = root.spanContext();
      await new Promise((r) => setImmediate(r));
      const child = await inSpan('child', {}, async (c) => c.spanContext());
      return { rootCtx, child, headers: traceHeaders() };
    });
    expect(seen.rootCtx.traceFlags).toBe(TraceFlags.SAMPLED);
    expect(seen.child.traceId).toBe(seen.rootCtx.traceId);
    expect(seen.child.spanId).not.toBe(seen.rootCtx.spanId);
    const sent = parse(seen.headers.traceparent!);
    expect(sent).toEqual({ traceId: seen.rootCtx.traceId, spanId: seen.rootCtx.spanId, flags: '01' });
  });

  it('continues an incoming traceparent and keeps its sampled flag, sampled or not', async () => {
    for (const flags of ['01', '00']) {
      const incoming = propagation.extract(context.active(), { traceparent: `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-${flags}` });
      const out = await inSpan('server', { parent: incoming }, async () => parse(traceHeaders().traceparent!));
      expect(out.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
      expect(out.spanId).not.toBe('00f067aa0ba902b7');
      expect(out.flags).toBe(flags);
    }
  });

  it('ids stay unique and well-formed across many refills of their random pool', () => {
    const spans = Array.from({ length: 3_000 }, () => tracer().startSpan('r', { root: true }).spanContext());
    expect(new Set(spans.map((c) => c.spanId)).size).toBe(spans.length);
    expect(new Set(spans.map((c) => c.traceId)).size).toBe(spans.length);
    for (const c of spans) {
      expect(c.spanId).toMatch(/^[0-9a-f]{16}$/);
      expect(c.traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(trace.isSpanContextValid(c)).toBe(true);
    }
  });

  it('startActiveSpan runs its function with the span active, in each of its forms', () => {
    const t = tracer();
    const a = t.startActiveSpan('a', (s) => [s.spanContext().spanId, trace.getActiveSpan()?.spanContext().spanId]);
    expect(a[0]).toBe(a[1]);
    const b = t.startActiveSpan('b', { attributes: { k: 1 } }, context.active(), (s) => [s.spanContext().spanId, trace.getActiveSpan()?.spanContext().spanId]);
    expect(b[0]).toBe(b[1]);
  });

  it('the active span, which stamps the log lines (createLogger), is the one being run', async () => {
    const [active, own] = await inSpan('logged', {}, async (s) => [trace.getActiveSpan()?.spanContext(), s.spanContext()]);
    expect(active).toEqual(own);
  });
});

describe('the SDK is loaded only to export', () => {
  // Importing the OpenTelemetry SDK cost each service start about 85 ms of CPU (docs/testing.md);
  // a process with nowhere to export must not pay it. A child process records what it imports.
  const importsOf = (otlpEndpoint: string): string[] => {
    const dir = mkdtempSync(join(tmpdir(), 'kandev-imports-'));
    const file = join(dir, 'imports.txt');
    const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
    try {
      execFileSync(process.execPath, ['--import', pathToFileURL(fixture('record-imports.mjs')).href, fixture('init-tracing.mjs')], {
        env: { ...process.env, RECORD_IMPORTS_FILE: file, OTLP_ENDPOINT: otlpEndpoint },
        stdio: 'pipe',
      });
      return readFileSync(file, 'utf8').split('\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  const sdk = (urls: string[]) => urls.filter((u) => /@opentelemetry\/(sdk-trace-|exporter-|resources)/.test(u));

  it('with no exporter, no SDK module is imported; with one, the SDK is', () => {
    expect(sdk(importsOf(''))).toEqual([]);
    // An endpoint nothing listens on: no span is made, so nothing is sent to it.
    expect(sdk(importsOf('http://127.0.0.1:9'))).not.toEqual([]);
  });
});
