import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One finished span as a service exported it (OTLP/HTTP JSON), times in ms since the epoch. */
export interface CollectedSpan {
  service: string;
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  start: number;
  end: number;
  attributes: Record<string, unknown>;
  /** Span events (timestamps a service marks inside a span), ms since the epoch. */
  events: Array<{ name: string; time: number }>;
}

export interface SpanCollector {
  /** The base URL to give services as OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  spans(): CollectedSpan[];
  clear(): void;
  stop(): Promise<void>;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes?: Array<{ key: string; value: OtlpValue }>;
  events?: Array<{ name: string; timeUnixNano: string | number }>;
}
interface OtlpExport {
  resourceSpans?: Array<{ resource?: { attributes?: Array<{ key: string; value: OtlpValue }> }; scopeSpans?: Array<{ spans?: OtlpSpan[] }> }>;
}

const valueOf = (v: OtlpValue): unknown => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? v.boolValue));
// Nanoseconds since the epoch do not fit a double exactly; ms with µs precision do.
const nanosToMs = (n: string | number) => {
  const s = String(n);
  return s.length > 6 ? Number(s.slice(0, -6)) + Number(s.slice(-6)) / 1e6 : Number(s) / 1e6;
};

function readAll(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/**
 * A minimal OTLP/HTTP (JSON) trace receiver inside the bench process: every service of the stack
 * exports its spans here, so one request's hops can be read from the spans of all its processes.
 */
export async function startSpanCollector(): Promise<SpanCollector> {
  const collected: CollectedSpan[] = [];
  const server = createServer((req, res) => {
    if (req.method !== 'POST' || !req.url?.startsWith('/v1/traces')) return void res.writeHead(404).end();
    readAll(req)
      .then((text) => {
        const body = JSON.parse(text) as OtlpExport;
        for (const rs of body.resourceSpans ?? []) {
          const service = String(valueOf(rs.resource?.attributes?.find((a) => a.key === 'service.name')?.value ?? {}) ?? 'unknown');
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) {
              collected.push({
                service,
                name: s.name,
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId || null,
                start: nanosToMs(s.startTimeUnixNano),
                end: nanosToMs(s.endTimeUnixNano),
                attributes: Object.fromEntries((s.attributes ?? []).map((a) => [a.key, valueOf(a.value)])),
                events: (s.events ?? []).map((e) => ({ name: e.name, time: nanosToMs(e.timeUnixNano) })),
              });
            }
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      })
      .catch(() => res.writeHead(400).end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans: () => collected,
    clear: () => void (collected.length = 0),
    stop: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** The spans of one trace, by id, with their children. */
export class Trace {
  readonly byId = new Map<string, CollectedSpan>();
  constructor(readonly spans: CollectedSpan[]) {
    for (const s of spans) this.byId.set(s.spanId, s);
  }
  /** The first span named `name` (a prefix when it ends with `*`), optionally under `parent`. */
  find(name: string, parent?: CollectedSpan): CollectedSpan | undefined {
    const match = name.endsWith('*') ? (s: CollectedSpan) => s.name.startsWith(name.slice(0, -1)) : (s: CollectedSpan) => s.name === name;
    return this.spans.find((s) => match(s) && (!parent || this.isUnder(s, parent)));
  }
  isUnder(s: CollectedSpan, ancestor: CollectedSpan): boolean {
    for (let p = s.parentSpanId ? this.byId.get(s.parentSpanId) : undefined; p; p = p.parentSpanId ? this.byId.get(p.parentSpanId) : undefined) {
      if (p.spanId === ancestor.spanId) return true;
    }
    return false;
  }
}

/** Group spans by trace. */
export function traces(spans: readonly CollectedSpan[]): Trace[] {
  const by = new Map<string, CollectedSpan[]>();
  for (const s of spans) {
    const list = by.get(s.traceId);
    if (list) list.push(s);
    else by.set(s.traceId, [s]);
  }
  return [...by.values()].map((l) => new Trace(l));
}

export const duration = (s: CollectedSpan | undefined) => (s ? s.end - s.start : Number.NaN);

/** The time of the first event named `name` on a span (NaN when absent). */
export const eventTime = (s: CollectedSpan | undefined, name: string) => s?.events.find((e) => e.name === name)?.time ?? Number.NaN;
