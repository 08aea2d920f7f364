import { summarize, type Stats } from '../stats.js';

export const log = (m: string) => process.stderr.write(`[budget] ${m}\n`);

/**
 * The cases interleaved call by call (a, b, c, a, b, c, ...), so the machine's noise (other work on
 * a shared host) falls on each alike and their ratios hold where their absolute figures do not.
 */
export async function interleaved(ops: Record<string, () => Promise<unknown>>, iterations: number, warmup: number): Promise<Record<string, Stats>> {
  const names = Object.keys(ops);
  const out = Object.fromEntries(names.map((n) => [n, [] as number[]]));
  for (let i = 0; i < warmup + iterations; i++) {
    for (const n of names) {
      const t = performance.now();
      await ops[n]!();
      if (i >= warmup) out[n]!.push(performance.now() - t);
    }
  }
  return Object.fromEntries(names.map((n) => [n, summarize(out[n]!)]));
}

/** a / b at the median and at p99. */
export const ratio = (a: Stats, b: Stats) => ({ p50: a.p50 / b.p50, p99: a.p99 / b.p99 });

/** Spread of a few runs: min, median, max. */
export function spread(xs: readonly number[]) {
  const s = [...xs].sort((x, y) => x - y);
  return { n: s.length, min: s[0]!, median: s[Math.floor((s.length - 1) / 2)]!, max: s.at(-1)! };
}
