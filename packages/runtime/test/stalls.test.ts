import { describe, expect, it, vi } from 'vitest';

type Stalls = typeof import('../src/stalls.js');
/**
 * A fresh copy of the module: the recorder is once per process, and another file of this worker
 * (one module graph per worker, vitest.shared.ts) may have started it for a service already.
 */
async function freshStalls(): Promise<Stalls> {
  vi.resetModules();
  return import('../src/stalls.js');
}

const epochNow = () => performance.timeOrigin + performance.now();

/** Until `pred` holds of a fresh report (the recorder's windows close every 100 ms). */
async function reportWhere({ stallReport }: Stalls, since: number, pred: (r: NonNullable<ReturnType<Stalls['stallReport']>>) => boolean) {
  for (const end = Date.now() + 10_000; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
    const r = stallReport(since);
    if (r && pred(r)) return r;
  }
  throw new Error(`the stall recorder never reported it: ${JSON.stringify(stallReport(since))}`);
}

describe('stall recorder', () => {
  it('is off until started', async () => {
    const { activity, stallReport } = await freshStalls();
    expect(stallReport()).toBeNull();
    expect(activity('before-start', () => 7)).toBe(7); // runs, records nothing
  });

  it('records a blocked event loop, GC pauses and marked work, each in epoch ms', async () => {
    const stalls = await freshStalls();
    const { activity, noteActivity, stallReport, startStallRecorder } = stalls;
    startStallRecorder('test');
    // Its delay histogram samples from the loop's timers: block the loop only once it has closed a
    // first window, or the block can fall before the histogram's first sample and go unseen.
    await reportWhere(stalls, 0, (x) => x.loop.length > 0);
    const since = epochNow();
    // The loop held for 80 ms: the window that contains it reports a delay of about that much.
    const until = performance.now() + 80;
    while (performance.now() < until);
    // Young objects, until a scavenge has been seen (how many it takes depends on the heap's state).
    let keep: unknown[] = [];
    const churn = () => {
      for (let i = 0; i < 200_000; i++) keep.push({ i, s: `x${i}` });
      keep = [];
    };
    churn();
    await activity('sweep', () => new Promise((r) => setTimeout(r, 30)));
    noteActivity('refresh', epochNow() - 5);
    const r = await reportWhere(stalls, since, (x) => {
      if (x.gc.length === 0) churn();
      return x.loop.some((w) => w.max_ms >= 60) && x.gc.length > 0;
    });
    expect(r.service).toBe('test');
    const sweep = r.activities.find((a) => a.name === 'sweep')!;
    expect(sweep.ms).toBeGreaterThanOrEqual(25);
    expect(sweep.at).toBeGreaterThanOrEqual(since);
    expect(r.activities.find((a) => a.name === 'refresh')!.ms).toBeGreaterThanOrEqual(4);
    expect(r.gc[0]!.at + r.gc[0]!.ms).toBeGreaterThanOrEqual(since);
    // Only what ended after `since` comes back.
    expect(stallReport(epochNow() + 60_000)!.activities).toEqual([]);
    expect(keep).toHaveLength(0);
  });
});
