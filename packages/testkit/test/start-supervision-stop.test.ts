// `npm start` supervision: SIGTERM to the launcher leaves nothing running; a crash loop stops
// everything and exits 1.
import { afterAll, describe, expect, it } from 'vitest';
import { runCleanups, sleep, startStack, stoppedWithin } from './start-harness.js';

afterAll(runCleanups);

describe('npm start supervision', () => {
  it('SIGTERM to the launcher stops everything', async () => {
    const s = await startStack('launcher');
    s.child.kill('SIGTERM');
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, s.out()).toEqual({ code: 0, signal: null });
    expect(
      (await s.survivors()).map((p) => `${p.pid} ${p.cmd}`),
      s.out(),
    ).toEqual([]);
  }, 150_000);

  it('gives up on a crash loop: stops everything and exits 1', async () => {
    const s = await startStack('launcher', { KANDEV_RESTART_LIMIT: '2', KANDEV_RESTART_BACKOFF_MS: '100' });
    const first = s.servicePid('orchestrator')!;
    process.kill(first, 'SIGKILL');
    let second: number | undefined;
    for (const deadline = Date.now() + 40_000; Date.now() < deadline; await sleep(100)) {
      second = s.servicePid('orchestrator');
      if (second && second !== first && /orchestrator restarted/.test(s.out())) break;
    }
    expect(second, s.out()).not.toBe(first);
    process.kill(second!, 'SIGKILL');
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, s.out()).toEqual({ code: 1, signal: null });
    expect(s.out()).toMatch(/orchestrator exited \(SIGKILL\): 2 crashes within 60s is a crash loop; giving up/);
    expect(
      (await s.survivors()).map((p) => `${p.pid} ${p.cmd}`),
      s.out(),
    ).toEqual([]);
  }, 150_000);
});
