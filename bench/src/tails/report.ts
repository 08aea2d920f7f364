import { execFileSync } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { summarize } from '../stats.js';
import type { SpanIndex } from './breakdown.js';
import type { Call } from './calls.js';
import type { StallLog } from './stalls.js';

/** Calls slower than this are the tail the issue is about: each gets its trace and its services' stalls. */
export const SLOW_MS = Number(process.env.TAILS_SLOW_MS ?? 100);
/** Slow calls of a group written out in full (the rest are counted, and their largest self time kept). */
const DETAILED = Number(process.env.TAILS_DETAILED ?? 40);

const r2 = (x: number) => Math.round(x * 100) / 100;

/** Where each kind of call starts its trace. */
const ROOTS: Record<Call['kind'], [string, string]> = {
  stop: ['kandev-mcp', 'tools/call stop_task_kandev'],
  cancel: ['kandev-gateway', 'WS agent.cancel'],
};

export function slowCall(c: Call, spans: SpanIndex, stalls: StallLog | undefined) {
  const [service, root] = ROOTS[c.kind];
  return { ms: r2(c.ms), at: Math.round(c.from), trace: spans.breakdown(service, root, c.from, c.to), services: stalls?.during(c.from, c.to) ?? null };
}

/** One group of calls (a stack, a kind, a background): the distribution, its bounds, and the slow calls' evidence. */
export function callGroup(calls: Call[], spans: SpanIndex, stalls: StallLog | undefined) {
  const c0 = calls[0]!;
  const st = summarize(calls.map((c) => c.ms));
  const slow = calls.filter((c) => c.ms > SLOW_MS).sort((a, b) => b.ms - a.ms);
  const detailed = slow.slice(0, DETAILED).map((c) => slowCall(c, spans, stalls));
  return {
    stack: c0.stack,
    kind: c0.kind,
    background: c0.background,
    n: st.n,
    p50_ms: r2(st.p50),
    p90_ms: r2(st.p90),
    p99_ms: r2(st.p99),
    max_ms: r2(st.max),
    p99_over_p50: r2(st.p99 / st.p50),
    over_slow_ms: slow.length,
    slowest_five_ms: slow.slice(0, 5).map((c) => r2(c.ms)),
    meets_bounds: st.p99 <= 3 * st.p50 && slow.length === 0,
    slow: detailed,
  };
}

export function gitCommit(): string | null {
  try {
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim() !== '';
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim() + (dirty ? '+dirty' : '');
  } catch {
    return null;
  }
}

export function machine(loadAtStart: number[]) {
  return {
    cpus: cpus().length,
    cpu_model: cpus()[0]?.model.trim() ?? '?',
    node: process.version,
    load_average_start: loadAtStart.map(r2),
    load_average_end: loadavg().map(r2),
  };
}
