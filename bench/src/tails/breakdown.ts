import { traces, type CollectedSpan, type Trace } from '../spans.js';

/**
 * Where one slow call spent its time, from the spans every service exported (OTLP to the bench):
 * its trace's spans with their offset from the call's start and their self time (the span less the
 * union of its children), largest self time first; the span events of the orchestrator's handler
 * (the steps of a stop or a cancel); and the spans of other traces that ran in each service
 * meanwhile (what else that process was doing).
 */
export interface CallBreakdown {
  trace_id: string | null;
  /** The client's time outside the root span (HTTP, the client library, the socket). */
  outside_root_ms: number | null;
  /** Largest self times of the trace's spans. */
  self: Array<{ service: string; name: string; at_ms: number; ms: number; self_ms: number }>;
  /** Every span of the trace in start order: "+offset service name duration". */
  spans: string[];
  /** Span events of the spans that have them (offset from the call's start). */
  events: string[];
  /** Other traces' spans overlapping the call, per service: name → count and ms inside the call. */
  concurrent: Record<string, Array<{ name: string; n: number; ms: number }>>;
}

const r1 = (x: number) => Math.round(x * 10) / 10;
const short = (service: string) => service.replace(/^kandev-/, '');

/** Union length of intervals clipped to [from, to]. */
function covered(intervals: Array<[number, number]>, from: number, to: number): number {
  const xs = intervals.map(([a, b]) => [Math.max(a, from), Math.min(b, to)] as [number, number]).filter(([a, b]) => b > a);
  xs.sort((p, q) => p[0] - q[0]);
  let total = 0;
  let end = -Infinity;
  for (const [a, b] of xs) {
    if (b <= end) continue;
    total += b - Math.max(a, end);
    end = b;
  }
  return total;
}

export class SpanIndex {
  private readonly byTrace: Trace[];
  constructor(private readonly all: readonly CollectedSpan[]) {
    this.byTrace = traces(all);
  }

  /** The trace whose root span `rootName` (in `service`) started within [from, to]. */
  rootOf(service: string, rootName: string, from: number, to: number): { t: Trace; root: CollectedSpan } | null {
    for (const t of this.byTrace) {
      const root = t.spans.find((s) => s.service === service && s.name === rootName && s.start >= from - 1 && s.start <= to);
      if (root) return { t, root };
    }
    return null;
  }

  breakdown(service: string, rootName: string, from: number, to: number): CallBreakdown {
    const hit = this.rootOf(service, rootName, from, to);
    if (!hit) return { trace_id: null, outside_root_ms: null, self: [], spans: [], events: [], concurrent: {} };
    const { t, root } = hit;
    const children = new Map<string, CollectedSpan[]>();
    for (const s of t.spans) if (s.parentSpanId) children.set(s.parentSpanId, [...(children.get(s.parentSpanId) ?? []), s]);
    const self = t.spans
      .map((s) => {
        const kids = (children.get(s.spanId) ?? []).map((c) => [c.start, c.end] as [number, number]);
        return {
          service: short(s.service),
          name: s.name,
          at_ms: r1(s.start - from),
          ms: r1(s.end - s.start),
          self_ms: r1(s.end - s.start - covered(kids, s.start, s.end)),
        };
      })
      .sort((a, b) => b.self_ms - a.self_ms)
      .slice(0, 8);
    const ordered = [...t.spans].sort((a, b) => a.start - b.start);
    const spans = ordered.map((s) => `+${r1(s.start - from)} ${short(s.service)} ${s.name} ${r1(s.end - s.start)}`);
    const events = ordered.flatMap((s) => s.events.map((e) => `+${r1(e.time - from)} ${short(s.service)} ${s.name}: ${e.name}`));
    const concurrent: CallBreakdown['concurrent'] = {};
    const perService = new Map<string, Map<string, { n: number; ms: number }>>();
    for (const s of this.all) {
      if (s.traceId === root.traceId || s.end < from || s.start > to) continue;
      const m = perService.get(s.service) ?? new Map<string, { n: number; ms: number }>();
      perService.set(s.service, m);
      const e = m.get(s.name) ?? { n: 0, ms: 0 };
      e.n++;
      e.ms += Math.min(s.end, to) - Math.max(s.start, from);
      m.set(s.name, e);
    }
    for (const [svc, m] of perService)
      concurrent[short(svc)] = [...m]
        .map(([name, e]) => ({ name, n: e.n, ms: r1(e.ms) }))
        .sort((a, b) => b.ms - a.ms)
        .slice(0, 8);
    return { trace_id: root.traceId, outside_root_ms: r1(to - from - (root.end - root.start)), self, spans, events, concurrent };
  }
}
