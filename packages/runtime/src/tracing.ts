import {
  context,
  propagation,
  trace,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  type Context,
  type Span,
  type SpanOptions,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import { exportsSpans, type TracingEnv } from './resource.js';
import type { MsgHdrs } from '@nats-io/nats-core';
import { randomFillSync } from 'node:crypto';

export { SpanKind, context, trace, propagation, exportsSpans };
export type { TracingEnv };
export type { Span, Context };

/** A tracer provider that can be shut down: the SDK's (recording.ts) or PropagatingTracerProvider. */
export type ProcessTracerProvider = TracerProvider & { shutdown(): Promise<void> };

/** The process's tracer provider, once initTracing has run (a promise while the SDK loads). */
let provider: Promise<ProcessTracerProvider> | undefined;
/** Whether that provider records spans (an exporter is configured). */
let recording = false;

export interface TracingOptions {
  /** service.name unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names another. */
  serviceName: string;
  /** service.version (the service's package version). */
  serviceVersion?: string | undefined;
  /** service.instance.id (INSTANCE_ID). */
  instanceId?: string | undefined;
  /** The OTEL_* variables (exportsSpans, resource.ts). */
  env?: TracingEnv;
  /** The service.* attributes stay these, whatever `env` says (agentctl: the environment is its lifecycle's). */
  ownIdentity?: boolean;
  /** Tests pass an in-memory exporter here (recorded whatever `env` says). */
  exporter?: SpanExporter;
}

/**
 * One tracer provider per process; a second call gets the first one's. W3C trace context is always
 * registered, so ids cross NATS and HTTP hops, and reach the log lines, even when nothing exports.
 * With nowhere to export, spans are not recorded at all (PropagatingTracerProvider): a recorded
 * span that is dropped at its end cost the hot paths CPU for nothing (docs/history/
 * fast-paths-rounds.md, "Eleventh round"), and the SDK (recording.ts) is not even loaded: importing
 * it cost every service start about 85 ms of CPU (docs/testing.md).
 */
export function initTracing(opts: TracingOptions): Promise<ProcessTracerProvider> {
  provider ??= opts.exporter || exportsSpans(opts.env ?? {}) ? startRecording(opts) : Promise.resolve(startPropagating());
  return provider;
}

async function startRecording(opts: TracingOptions): Promise<ProcessTracerProvider> {
  const { recordingProvider } = await import('./recording.js');
  const sdk = recordingProvider(opts);
  recording = true;
  return sdk;
}

function startPropagating(): PropagatingTracerProvider {
  const propagating = new PropagatingTracerProvider();
  // What the SDK's provider installs besides itself when it registers.
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(propagating);
  return propagating;
}

/**
 * Whether spans are recorded (an exporter is configured). Instrumentation that costs something
 * beyond a span start (the database statements' spans) is installed only then.
 */
export const tracingRecords = (): boolean => recording;

export async function shutdownTracing(): Promise<void> {
  const pending = provider;
  provider = undefined;
  // After the wait: an SDK still loading when shutdown began sets `recording` when it arrives.
  const p = await pending;
  recording = false;
  await p?.shutdown();
  // Either provider installed itself as the global one (with a propagator and a context manager):
  // a shut-down provider must not stay there, and the API refuses a new global until it is gone.
  if (p) {
    trace.disable();
    propagation.disable();
    context.disable();
  }
}

/**
 * Spans that carry ids and nothing else, for a process that exports none. A span gets an id of its
 * own; it continues its parent's trace and keeps the parent's sampled flag (a root is sampled, as
 * the SDK's default sampler decides), so a downstream service that does export records its part of
 * the trace as before. Attributes, events and statuses are dropped, as by any non-recording span.
 */
export class PropagatingTracerProvider implements TracerProvider {
  private readonly tracer = new PropagatingTracer();
  getTracer(): Tracer {
    return this.tracer;
  }
  async shutdown(): Promise<void> {}
}

/**
 * Random bytes for ids, drawn 6 KiB at a time: one randomFillSync per few hundred spans instead of
 * one per span, whose call cost ten times the id itself (a span per request, publish and query).
 */
const POOL_BYTES = 6_144;
const pool = Buffer.alloc(POOL_BYTES);
let drawn = POOL_BYTES;
const ALL_ZERO = /^0+$/;

/** `bytes` random bytes as hex, never all zero (an invalid trace or span id). */
function randomHex(bytes: number): string {
  for (;;) {
    if (drawn + bytes > POOL_BYTES) {
      randomFillSync(pool);
      drawn = 0;
    }
    const hex = pool.toString('hex', drawn, drawn + bytes);
    drawn += bytes;
    if (!ALL_ZERO.test(hex)) return hex;
  }
}

class PropagatingTracer implements Tracer {
  startSpan(_name: string, options?: SpanOptions, ctx: Context = context.active()): Span {
    const parent = options?.root ? undefined : trace.getSpanContext(ctx);
    const spanId = randomHex(8);
    if (parent && trace.isSpanContextValid(parent)) {
      return trace.wrapSpanContext({
        traceId: parent.traceId,
        spanId,
        traceFlags: parent.traceFlags,
        ...(parent.traceState ? { traceState: parent.traceState } : {}),
      });
    }
    return trace.wrapSpanContext({ traceId: randomHex(16), spanId, traceFlags: TraceFlags.SAMPLED });
  }

  startActiveSpan<F extends (span: Span) => unknown>(name: string, ...rest: [F] | [SpanOptions, F] | [SpanOptions, Context, F]): ReturnType<F> {
    const fn = rest[rest.length - 1] as F;
    const options = rest.length > 1 ? (rest[0] as SpanOptions) : undefined;
    const parent = rest.length > 2 ? (rest[1] as Context) : context.active();
    const span = this.startSpan(name, options, parent);
    return context.with(trace.setSpan(parent, span), () => fn(span)) as ReturnType<F>;
  }
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
