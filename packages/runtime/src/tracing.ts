import { context, propagation, trace, SpanKind, SpanStatusCode, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, SimpleSpanProcessor, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import type { MsgHdrs } from '@nats-io/nats-core';

export { SpanKind, context, trace, propagation };
export type { Span, Context };

let provider: NodeTracerProvider | undefined;

export interface TracingOptions {
  serviceName: string;
  /** OTLP/HTTP endpoint; unset = spans are created (ids propagate) but not exported. */
  otlpEndpoint?: string | undefined;
  /** Tests pass an in-memory exporter here. */
  exporter?: SpanExporter;
}

/**
 * One tracer provider per process. W3C trace context is always registered, so ids cross
 * NATS and HTTP hops even when nothing exports.
 */
export function initTracing(opts: TracingOptions): NodeTracerProvider {
  if (provider) return provider;
  const spanProcessors: SpanProcessor[] = [];
  if (opts.exporter) spanProcessors.push(new SimpleSpanProcessor(opts.exporter));
  if (opts.otlpEndpoint) {
    const url = opts.otlpEndpoint.replace(/\/$/, '') + '/v1/traces';
    spanProcessors.push(new BatchSpanProcessor(new OTLPTraceExporter({ url })));
  }
  provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: opts.serviceName }),
    spanProcessors,
  });
  provider.register({ propagator: new W3CTraceContextPropagator() });
  return provider;
}

export async function shutdownTracing(): Promise<void> {
  const p = provider;
  provider = undefined;
  await p?.shutdown();
}

export const tracer = (): Tracer => trace.getTracer('kandev');

/** Carrier adapters so the W3C propagator reads and writes NATS headers. */
const natsSetter = { set: (h: MsgHdrs, k: string, v: string) => h.set(k, v) };
const natsGetter = {
  get: (h: MsgHdrs | undefined, k: string) => h?.get(k) || undefined,
  keys: (h: MsgHdrs | undefined) => (h ? Array.from(h.keys()) : []),
};

export function injectTrace(headers: MsgHdrs, ctx: Context = context.active()): void {
  propagation.inject(ctx, headers, natsSetter);
}
export function extractTrace(headers: MsgHdrs | undefined): Context {
  return propagation.extract(context.active(), headers, natsGetter);
}
/** For HTTP hops (agentctl): a plain object of headers. */
export function traceHeaders(ctx: Context = context.active()): Record<string, string> {
  const out: Record<string, string> = {};
  propagation.inject(ctx, out);
  return out;
}

/** Run fn inside a span that ends (with error status on throw) when fn settles. */
export async function inSpan<T>(
  name: string,
  opts: { kind?: SpanKind; attributes?: Record<string, string | number | boolean>; parent?: Context },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = opts.parent ?? context.active();
  const span = tracer().startSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes ?? {} }, parent);
  return context.with(trace.setSpan(parent, span), async () => {
    try {
      return await fn(span);
    } catch (e) {
      span.recordException(e as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (e as Error).message });
      throw e;
    } finally {
      span.end();
    }
  });
}
