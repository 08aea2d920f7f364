import { describe, expect, it } from 'vitest';
import { activity, noteActivity, stallReport, startStallRecorder } from '../src/stalls.js';

const epochNow = () => performance.timeOrigin + performance.now();

/** Until `pred` holds of a fresh report (the recorder's windows close every 100 ms). */
async function reportWhere(since: number, pred: (r: NonNullable<ReturnType<typeof stallReport>>) => boolean) {
  for (const end = Date.now() + 10_000; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
    const r = stallReport(since);
    if (r && pred(r)) return r;
  }
  throw new Error('the stall recorder never reported it');
}

describe('stall recorder', () => {
  it('is off until started', () => {
    expect(stallReport()).toBeNull();
    expect(activity('before-start', () => 7)).toBe(7); // runs, records nothing
  });

  it('records a blocked event loop, GC pauses and marked work, each in epoch ms', async () => {
    startStallRecorder('test');
    const since = epochNow();
    // The loop held for 80 ms: the window that contains it reports a delay of about that much.
    const until = performance.now() + 80;
    while (performance.now() < until);
    // Young objects enough for scavenges.
    let keep: unknown[] = [];
    for (let i = 0; i < 200_000; i++) keep.push({ i, s: `x${i}` });
    keep = [];
    await activity('sweep', () => new Promise((r) => setTimeout(r, 30)));
    noteActivity('refresh', epochNow() - 5);
    const r = await reportWhere(since, (x) => x.loop.some((w) => w.max_ms >= 60) && x.gc.length > 0);
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
