import { appendFileSync } from 'node:fs';

/**
 * Wall-clock start and end of one client call, for `npm run bench:wire` (src/wire/run.ts), which
 * lines them up with the packets it captured: a packet's timestamp is wall-clock time, and
 * `performance.timeOrigin + performance.now()` is too. Written only when BENCH_WALL_LOG names a file.
 */
const file = process.env.BENCH_WALL_LOG;

export function recordWall(kind: 'stop' | 'design', startedAt: number, ms: number): void {
  if (!file) return;
  const start = performance.timeOrigin + startedAt;
  // Also in CLOCK_MONOTONIC µs (what V8's CPU profiles of the services count in), to cut a profile at each call.
  const monoEnd = Number(process.hrtime.bigint() / 1000n) - (performance.now() - startedAt - ms) * 1000;
  appendFileSync(file, `${kind} ${start.toFixed(3)} ${(start + ms).toFixed(3)} ${(monoEnd - ms * 1000).toFixed(0)} ${monoEnd.toFixed(0)}\n`);
}
