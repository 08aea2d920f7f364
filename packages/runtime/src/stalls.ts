import { monitorEventLoopDelay, PerformanceObserver, constants as perf } from 'node:perf_hooks';

/**
 * The stall recorder: what a service's event loop went through lately, so a slow request can be
 * lined up with what held its process at that moment (docs/fast-paths.md, "Tails"). Three rings,
 * each of the last RING entries, times as epoch ms:
 * - the loop's delay per TICK_MS window (max and p99 of `monitorEventLoopDelay`, reset each window),
 * - GC pauses (`PerformanceObserver` of `gc`),
 * - background work the service marks with `noteActivity` / `activity` (reconciler sweeps, the
 *   outbox relay, registry refreshes, event batches, teardown steps, a launch's spawn).
 * Served as JSON on the health server's `/debug/stalls` (health.ts); it costs one 100 ms timer and
 * the histogram prom-client's default metrics already keep.
 */
const TICK_MS = 100;
const RING = 2_000;

export interface LoopWindow {
  /** End of the window, epoch ms. */
  at: number;
  max_ms: number;
  p99_ms: number;
}
export interface TimedEntry {
  name: string;
  /** Start, epoch ms. */
  at: number;
  ms: number;
}
export interface StallReport {
  service: string;
  now: number;
  loop: LoopWindow[];
  gc: TimedEntry[];
  activities: TimedEntry[];
}

class Ring<T> {
  private readonly items: T[] = [];
  push(x: T): void {
    if (this.items.push(x) > RING) this.items.shift();
  }
  since(pred: (x: T) => boolean): T[] {
    return this.items.filter(pred);
  }
}

const epochNow = () => performance.timeOrigin + performance.now();
const GC_KINDS: Record<number, string> = {
  [perf.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [perf.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [perf.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [perf.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};

let recorder: { service: string; loop: Ring<LoopWindow>; gc: Ring<TimedEntry>; activities: Ring<TimedEntry> } | undefined;

/** Start recording (once per process; the service runtime does it). */
export function startStallRecorder(service: string): void {
  if (recorder) return;
  const r = (recorder = { service, loop: new Ring<LoopWindow>(), gc: new Ring<TimedEntry>(), activities: new Ring<TimedEntry>() });
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  setInterval(() => {
    // nanoseconds; an empty window (the loop never ran a sample) reads 0
    r.loop.push({ at: epochNow(), max_ms: delay.max / 1e6, p99_ms: delay.percentile(99) / 1e6 });
    delay.reset();
  }, TICK_MS).unref();
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = (e as { detail?: { kind?: number } }).detail?.kind;
      r.gc.push({ name: GC_KINDS[kind ?? -1] ?? 'gc', at: performance.timeOrigin + e.startTime, ms: e.duration });
    }
  }).observe({ entryTypes: ['gc'] });
}

/** Record background work that ran from `startedAt` (epoch ms) until now. */
export function noteActivity(name: string, startedAt: number): void {
  recorder?.activities.push({ name, at: startedAt, ms: epochNow() - startedAt });
}

/** Run `fn` and record it as `name` once it settles (sync or async). */
export function activity<T>(name: string, fn: () => T): T {
  if (!recorder) return fn();
  const at = epochNow();
  let out: T;
  try {
    out = fn();
  } catch (e) {
    noteActivity(name, at);
    throw e;
  }
  if (out instanceof Promise) return out.finally(() => noteActivity(name, at)) as T;
  noteActivity(name, at);
  return out;
}

/** What was recorded since `since` (epoch ms), or null when the recorder is off. */
export function stallReport(since = 0): StallReport | null {
  if (!recorder) return null;
  return {
    service: recorder.service,
    now: epochNow(),
    loop: recorder.loop.since((w) => w.at >= since),
    gc: recorder.gc.since((g) => g.at + g.ms >= since),
    activities: recorder.activities.since((a) => a.at + a.ms >= since),
  };
}
