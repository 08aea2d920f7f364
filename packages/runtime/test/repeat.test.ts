import { expect, it } from 'vitest';
import { repeatEvery } from '../src/index.js';

/** Resolves when `count` calls have happened; `release` ends the call in flight. */
function gatedRun() {
  let calls = 0;
  let release: () => void = () => undefined;
  const started: Array<() => void> = [];
  const run = () => {
    calls++;
    started.splice(0).forEach((f) => f());
    return new Promise<void>((r) => (release = r));
  };
  const nextStart = () => new Promise<void>((r) => started.push(r));
  return { run, nextStart, release: () => release(), calls: () => calls };
}

it('runs again only after the last run settled, and a stop during a run schedules no other', async () => {
  const g = gatedRun();
  const errors: unknown[] = [];
  const first = g.nextStart();
  const stop = repeatEvery(5, g.run, (e) => errors.push(e));
  await first;
  // The interval has passed many times over while the first run is in flight: still one call.
  await new Promise((r) => setTimeout(r, 50));
  expect(g.calls()).toBe(1);
  const second = g.nextStart();
  g.release();
  await second;
  expect(g.calls()).toBe(2);
  stop();
  g.release();
  await new Promise((r) => setTimeout(r, 50));
  expect(g.calls()).toBe(2);
  expect(errors).toEqual([]);
});

it('passes an error that escapes a run to onError and keeps going', async () => {
  const errors: unknown[] = [];
  let calls = 0;
  let stop: () => void = () => undefined;
  const twice = new Promise<void>((resolve) => {
    stop = repeatEvery(
      5,
      async () => {
        calls++;
        if (calls === 2) resolve();
        throw new Error(`run ${calls}`);
      },
      (e) => errors.push((e as Error).message),
    );
  });
  await twice;
  stop();
  expect(errors[0]).toBe('run 1');
});
