import { STACK_SERVICES } from '@kandev/testkit';
import type { LoopWindow, StallReport, TimedEntry } from '@kandev/runtime';
import type { BenchStack } from '../e2e.js';
import { percentile } from '../stats.js';

/**
 * Each service's stall recorder (`/debug/stalls`, packages/runtime/src/stalls.ts), read every few
 * seconds while a part of the bench runs and kept here: its rings hold minutes, a run holds more.
 */
export interface ServiceStalls {
  loop: LoopWindow[];
  gc: TimedEntry[];
  activities: TimedEntry[];
}

export class StallLog {
  readonly byService = new Map<string, ServiceStalls>();
  private readonly last = new Map<string, number>();
  private readonly seen = new Map<string, Set<string>>();
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> = Promise.resolve();

  constructor(private readonly b: BenchStack) {}

  /**
   * Every 3 s: under Node's 5 s keep-alive timeout of the health server, so a read never races the
   * server closing its idle connection. A read that fails (a service too busy to answer) is tried
   * at the next tick; the rings hold minutes.
   */
  start(everyMs = 3_000): void {
    this.timer = setInterval(() => void (this.polling = this.poll().catch((e: unknown) => console.error(`[tails] stall read failed: ${String(e)}`))), everyMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.polling;
    await this.poll();
  }

  /** Read every service's rings since the last read (an entry is kept once: by its time and name). */
  async poll(): Promise<void> {
    await Promise.all(
      STACK_SERVICES.map(async (name) => {
        const health = this.b.stack.services.get(name)?.urls.health;
        if (!health) return;
        const since = this.last.get(name) ?? 0;
        const res = await fetch(`${health}/debug/stalls?since=${since}`);
        // A build without the recorder (a baseline checkout) answers 404: nothing to keep for it.
        const r = res.ok ? ((await res.json()) as StallReport | null) : (await res.text(), null);
        if (!r) return;
        const s = this.byService.get(name) ?? { loop: [], gc: [], activities: [] };
        this.byService.set(name, s);
        const seen = this.seen.get(name) ?? new Set<string>();
        this.seen.set(name, seen);
        const fresh = <T extends { at: number }>(kind: string, xs: T[]) =>
          xs.filter((x) => {
            const key = `${kind}:${x.at}:${(x as { name?: string }).name ?? ''}`;
            return seen.has(key) ? false : (seen.add(key), true);
          });
        s.loop.push(...fresh('loop', r.loop));
        s.gc.push(...fresh('gc', r.gc));
        s.activities.push(...fresh('activity', r.activities));
        // A window straddling the read is read again next time; the dedupe above keeps it once.
        this.last.set(name, r.now - 1_000);
      }),
    );
  }

  /** What each service's recorder saw overlapping [from, to] (epoch ms). */
  during(from: number, to: number): Record<string, { loop_max_ms: number; gc: TimedEntry[]; activities: TimedEntry[] }> {
    const out: Record<string, { loop_max_ms: number; gc: TimedEntry[]; activities: TimedEntry[] }> = {};
    const overlaps = (e: TimedEntry) => e.at <= to && e.at + e.ms >= from;
    for (const [name, s] of this.byService) {
      // A loop window covers the TICK before its `at`.
      const loop = s.loop.filter((w) => w.at >= from && w.at - 100 <= to);
      out[name] = {
        loop_max_ms: round(Math.max(0, ...loop.map((w) => w.max_ms))),
        gc: s.gc.filter(overlaps).map(roundEntry),
        activities: s.activities.filter(overlaps).map(roundEntry),
      };
    }
    return out;
  }

  /**
   * Per service over [from, to]: the p99 and the max of its 100 ms windows' largest delay. The p99 of
   * the windows' maxima is at least the loop's own p99 (each window counts as its worst sample).
   */
  loopDelay(from: number, to: number): Record<string, { p99_ms: number; max_ms: number; windows: number }> {
    const out: Record<string, { p99_ms: number; max_ms: number; windows: number }> = {};
    for (const [name, s] of this.byService) {
      const maxes = s.loop
        .filter((w) => w.at >= from && w.at - 100 <= to)
        .map((w) => w.max_ms)
        .sort((a, b) => a - b);
      out[name] = { p99_ms: maxes.length ? round(percentile(maxes, 99)) : Number.NaN, max_ms: round(maxes.at(-1) ?? Number.NaN), windows: maxes.length };
    }
    return out;
  }
}

const round = (x: number) => Math.round(x * 10) / 10;
const roundEntry = (e: TimedEntry): TimedEntry => ({ name: e.name, at: Math.round(e.at), ms: round(e.ms) });
