import { describe, expect, it } from 'vitest';
import { UidScan } from '../src/isolation/uid-scan.js';

/** A scan that records when each pass started and answers with its pass number under uid 1000. */
function countingScan() {
  const starts: number[] = [];
  const scan = () => {
    starts.push(performance.now());
    return new Map([[1000, [starts.length]]]);
  };
  return { starts, scan };
}

describe('UidScan', () => {
  it('starts the first pass without waiting out the spacing', async () => {
    const { starts, scan } = countingScan();
    // With an hour's spacing, any wait before the first pass would time the test out.
    const uidScan = new UidScan(3_600_000, scan);
    expect(await Promise.all([uidScan.pidsOf(1000), uidScan.pidsOf(2000)])).toEqual([[1], []]);
    expect(starts).toHaveLength(1);
  }, 10_000);

  it('gives the callers of one moment one pass, and a later caller a pass of its own, the spacing apart', async () => {
    const spacingMs = 50;
    const { starts, scan } = countingScan();
    const uidScan = new UidScan(spacingMs, scan);
    expect(await Promise.all([uidScan.pidsOf(1000), uidScan.pidsOf(1000), uidScan.pidsOf(1000)])).toEqual([[1], [1], [1]]);
    // Asked after the first pass: never answered from it.
    const second = uidScan.pidsOf(1000);
    const joining = uidScan.pidsOf(1000);
    expect(await Promise.all([second, joining])).toEqual([[2], [2]]);
    expect(await uidScan.pidsOf(1000)).toEqual([3]);
    expect(starts).toHaveLength(3);
    // Timers may fire up to a millisecond early by performance.now() (libuv counts whole ms).
    expect(starts[1]! - starts[0]!).toBeGreaterThanOrEqual(spacingMs - 2);
    expect(starts[2]! - starts[1]!).toBeGreaterThanOrEqual(spacingMs - 2);
  });
});
