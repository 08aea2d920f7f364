// `npm start` supervision: a service killed with -9 is restarted and the stack serves again;
// SIGTERM to npm's own pid and SIGINT to its process group leave nothing running (the launcher's
// own SIGTERM and the crash loop: start-supervision-stop.test.ts; its nats-server and PostgreSQL:
// start-supervision-infra.test.ts).
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../src/paths.js';
import { cleanups, readyz, runCleanups, sleep, startStack, stoppedWithin } from './start-harness.js';

afterAll(runCleanups);

describe('npm start supervision', () => {
  it("restarts a service killed with -9 (the stack serves again), and SIGTERM to npm's own pid stops everything", async () => {
    const s = await startStack('npm');
    expect(await readyz(s.gateway, 30_000)).toBe(200);
    const before = s.servicePid('gateway');
    expect(before, s.out()).toBeDefined();
    process.kill(before!, 'SIGKILL');

    let after: number | undefined;
    for (const deadline = Date.now() + 40_000; Date.now() < deadline; await sleep(200)) {
      after = s.servicePid('gateway');
      if (after && after !== before && /gateway restarted/.test(s.out())) break;
    }
    expect(after, s.out()).toBeDefined();
    expect(after).not.toBe(before);
    expect(s.out()).toMatch(/gateway exited unexpectedly \(SIGKILL\); restarting in \d+ ms/);
    // Same URL as printed: the port was pinned when npm start began.
    expect(await readyz(s.gateway, 30_000), s.out()).toBe(200);

    s.child.kill('SIGTERM'); // npm's own pid, as a process manager would
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, `npm start did not exit within 45 s of SIGTERM\n${s.out()}`).not.toBeNull();
    expect(
      (await s.survivors()).map((p) => `${p.pid} ${p.cmd}`),
      s.out(),
    ).toEqual([]);
  }, 180_000);

  it('SIGINT to the process group stops everything', async () => {
    const s = await startStack('launcher');
    process.kill(-s.child.pid!, 'SIGINT');
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, s.out()).toEqual({ code: 0, signal: null });
    expect(
      (await s.survivors()).map((p) => `${p.pid} ${p.cmd}`),
      s.out(),
    ).toEqual([]);
  }, 150_000);
});

describe('restart policy and the root check (pure)', () => {
  const lib = (f: string) => import(pathToFileURL(join(repoRoot, 'scripts/lib', f)).href);

  it('backs off exponentially and calls a crash loop within the window', async () => {
    const { decideRestart } = (await lib('supervise.mjs')) as {
      decideRestart: (c: number[], now: number, p: object) => { crashes: number[]; giveUp: boolean; delayMs?: number };
    };
    const policy = { limit: 4, windowMs: 60_000, baseMs: 500, maxMs: 10_000 };
    let crashes: number[] = [];
    const delays: number[] = [];
    for (const t of [0, 1_000, 2_000]) {
      const d = decideRestart(crashes, t, policy);
      expect(d.giveUp).toBe(false);
      delays.push(d.delayMs!);
      crashes = d.crashes;
    }
    expect(delays).toEqual([500, 1_000, 2_000]);
    expect(decideRestart(crashes, 3_000, policy).giveUp).toBe(true);
    // Old crashes fall out of the window: a service that crashes once an hour is restarted forever.
    expect(decideRestart(crashes, 3_000 + 61_000, policy)).toMatchObject({ giveUp: false, delayMs: 500 });
  });

  it('names the directory the postgres user cannot enter (root with a checkout in a private home)', async () => {
    const { firstUntraversableForPostgres } = (await lib('embedded-pg.mjs')) as {
      firstUntraversableForPostgres: (paths: string[], ids: { uid: number; groups: number[] } | null) => { dir: string; mode: string } | null;
    };
    const home = mkdtempSync(join(tmpdir(), 'kandev-home-'));
    cleanups.push(() => rmSync(home, { recursive: true, force: true }));
    mkdirSync(join(home, 'checkout', 'node_modules'), { recursive: true });
    chmodSync(home, 0o700);
    const ids = { uid: 4242, groups: [4242] }; // owns nothing here
    expect(firstUntraversableForPostgres([join(home, 'checkout', 'node_modules'), join(home, 'checkout', '.kandev', 'pg')], ids)).toMatchObject({
      dir: home,
      mode: '700',
    });
    chmodSync(home, 0o711);
    expect(firstUntraversableForPostgres([join(home, 'checkout', 'node_modules')], ids)).toBeNull();
  });
});
