import { execFileSync } from 'node:child_process';
import { against, type Figure } from '../results.js';
import { summarize, type Stats } from '../stats.js';
import type { SpanIndex } from './breakdown.js';
import type { Call } from './calls.js';
import type { StallLog } from './stalls.js';

/** Calls slower than this are the tail the issue is about: each gets its trace and its services' stalls. */
export const SLOW_MS = Number(process.env.TAILS_SLOW_MS ?? 100);
/** Slow calls of a group written out in full (the rest are counted, and their largest self time kept). */
const DETAILED = Number(process.env.TAILS_DETAILED ?? 40);
export const CALL_BOUNDS = 'p99 <= 3 x p50 and no call over slow_ms';

const r2 = (x: number) => Math.round(x * 100) / 100;

/** Where each kind of call starts its trace. */
const ROOTS: Record<Call['kind'], [string, string]> = {
  stop: ['kandev-mcp', 'tools/call stop_task_kandev'],
  cancel: ['kandev-gateway', 'WS agent.cancel'],
};

const WHAT: Record<Call['kind'], string> = {
  stop: "a coordinator's stop_task_kandev of a child just launched",
  cancel: "an operator's /ws agent.cancel of a turn just launched",
};
const STACKS: Record<string, string> = { this: 'this build', baseline: "the baseline checkout's stack (TAILS_BASELINE_ROOT)" };

/** A group's figure id: `stop.others-0.this`, `cancel.others-20.baseline`. */
export const groupId = (kind: Call['kind'], background: number, stack: string) => `${kind}.others-${background}.${stack}`;

export function slowCall(c: Call, spans: SpanIndex, stalls: StallLog | undefined) {
  const [service, root] = ROOTS[c.kind];
  return { ms: r2(c.ms), at: Math.round(c.from), trace: spans.breakdown(service, root, c.from, c.to), services: stalls?.during(c.from, c.to) ?? null };
}

export interface CallGroup {
  figure: Figure;
  stats: Stats;
  /** The slowest calls' evidence (trace breakdown, each service's stalls), slowest first: `details.slow[id]`. */
  slow: Array<ReturnType<typeof slowCall>>;
}

/** One group of calls (a stack, a kind, a background): the distribution, its bounds, and the slow calls' evidence. */
export function callGroup(calls: Call[], spans: SpanIndex, stalls: StallLog | undefined, failed: number): CallGroup {
  const c0 = calls[0]!;
  const stats = summarize(calls.map((c) => c.ms));
  const slow = calls.filter((c) => c.ms > SLOW_MS).sort((a, b) => b.ms - a.ms);
  const figure: Figure = {
    id: groupId(c0.kind, c0.background, c0.stack),
    label: `${WHAT[c0.kind]}, ${c0.background} other agents running, ${STACKS[c0.stack] ?? c0.stack}`,
    ...stats,
    p99_over_p50: r2(stats.p99 / stats.p50),
    over_slow_ms: slow.length,
    slowest_five_ms: slow.slice(0, 5).map((c) => r2(c.ms)),
    meets_bounds: stats.p99 <= 3 * stats.p50 && slow.length === 0,
    failed,
  };
  return { figure, stats, slow: slow.slice(0, DETAILED).map((c) => slowCall(c, spans, stalls)) };
}

/** Each baseline-stack group's figure becomes the baseline of this build's same kind and background. */
export function withBaselines(groups: CallGroup[]): Figure[] {
  const byId = new Map(groups.map((g) => [g.figure.id, g]));
  return groups.map(({ figure, stats }) => {
    if (!figure.id.endsWith('.this')) return figure;
    const baseId = figure.id.replace(/\.this$/, '.baseline');
    const base = byId.get(baseId);
    return base ? { ...figure, ...against(stats, baseId, base.stats) } : figure;
  });
}

/** A note when the checkout that ran had uncommitted changes (the file's `commit` is HEAD alone). */
export function dirtyNote(): string[] {
  try {
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim() !== '';
    return dirty ? ['the checkout had uncommitted changes (commit is its HEAD)'] : [];
  } catch {
    return [];
  }
}
