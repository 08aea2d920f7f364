/** Latency statistics in milliseconds. */
export interface Stats {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
  min: number;
  max: number;
  stddev: number;
}

/** Percentile of ascending `sorted` samples, linearly interpolated between ranks (Hyndman–Fan type 7). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

export function summarize(samples: readonly number[]): Stats {
  const sorted = [...samples].sort((a, b) => a - b);
  const n = sorted.length;
  const mean = sorted.reduce((s, x) => s + x, 0) / n;
  const variance = sorted.reduce((s, x) => s + (x - mean) ** 2, 0) / Math.max(1, n - 1);
  return {
    n,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    mean,
    min: sorted[0]!,
    max: sorted[n - 1]!,
    stddev: Math.sqrt(variance),
  };
}

export interface MeasureOptions {
  iterations: number;
  warmup: number;
}

/**
 * Latency of `op`, one call at a time: `warmup` calls that are not recorded (JIT, connection
 * and server caches), then `iterations` timed calls. `op` receives a running index, unique
 * across warm-up and measurement, for callers that need unique keys (message ids, rows).
 */
export async function measure(op: (i: number) => Promise<unknown>, opts: MeasureOptions): Promise<Stats> {
  let i = 0;
  for (let w = 0; w < opts.warmup; w++) await op(i++);
  const samples = new Array<number>(opts.iterations);
  for (let k = 0; k < opts.iterations; k++) {
    const t = performance.now();
    await op(i++);
    samples[k] = performance.now() - t;
  }
  return summarize(samples);
}
