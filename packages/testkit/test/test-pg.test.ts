// The shared embedded test PostgreSQL (scripts/lib/test-pg.mjs): processes that need it at the same
// time get one server between them, a later caller reuses it, and it stops by itself once idle.
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../src/paths.js';

const script = join(repoRoot, 'scripts/lib/test-pg.mjs');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** `ensureTestPostgres` in a process of its own, as a vitest worker of another package would call it. */
function ensureIn(dir: string, idleMs: number): Promise<string> {
  const code = `import(${JSON.stringify(pathToFileURL(script).href)}).then(async (m) => { process.stdout.write(await m.ensureTestPostgres({ dir: ${JSON.stringify(dir)}, idleMs: ${idleMs} })); process.exit(0); }, (e) => { console.error(e); process.exit(1); })`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.once('exit', (c) => (c === 0 ? resolve(out) : reject(new Error(`ensureTestPostgres failed: ${err}`))));
  });
}

/** How long the cleanup waits for the daemon to exit, then for its server's postmaster. */
const DAEMON_EXIT_MS = 15_000;
const POSTMASTER_EXIT_MS = 30_000;

const dirs: string[] = [];
afterAll(
  async () => {
    for (const dir of dirs) {
      try {
        const { daemonPid } = JSON.parse(readFileSync(join(dir, 'pg-state', 'state.json'), 'utf8')) as { daemonPid: number };
        process.kill(daemonPid, 'SIGTERM');
        for (const deadline = Date.now() + DAEMON_EXIT_MS; alive(daemonPid) && Date.now() < deadline;) await sleep(100);
      } catch {
        /* not running */
      }
      // The daemon's PostgreSQL server shuts down after the daemon itself: wait for its postmaster,
      // whose last writes would otherwise race the removal (ENOTEMPTY on pg_wal).
      const postmaster = join(dir, 'pg-state', 'pg', 'postmaster.pid');
      for (const deadline = Date.now() + POSTMASTER_EXIT_MS; existsSync(postmaster) && Date.now() < deadline;) await sleep(100);
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
      } catch (e) {
        // A temporary directory left behind is not what this file tests.
        console.warn(`[test-pg] could not remove ${dir}: ${(e as Error).message}`);
      }
    }
    // Its own waits, plus the removal's retries and headroom: the config's 30 s hook bound is shorter
    // than the waits above, and a loaded CI machine reached it.
  },
  DAEMON_EXIT_MS + POSTMASTER_EXIT_MS + 15_000,
);

describe('embedded test PostgreSQL', () => {
  it('is started once for concurrent callers in different processes, reused, and stops itself when idle', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'kandev-tpg-')), 'pg-state');
    chmodSync(join(dir, '..'), 0o755);
    dirs.push(join(dir, '..'));
    const idleMs = 3_000;

    const urls = await Promise.all([ensureIn(dir, idleMs), ensureIn(dir, idleMs), ensureIn(dir, idleMs)]);
    expect(new Set(urls).size).toBe(1);
    const state = JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) as { daemonPid: number; pgPid: number; url: string };
    expect(state.url).toBe(urls[0]);

    // A client connection holds it up past the idle bound.
    const sql = postgres(urls[0]!, { max: 1, onnotice: () => undefined });
    await sql`CREATE DATABASE kandev_tpg_probe`;
    await sleep(idleMs * 3); // two idle bounds past the last lease touch, checks every idleMs/2
    expect(alive(state.pgPid), 'stopped while a client was connected').toBe(true);
    expect(await ensureIn(dir, idleMs), 'a later caller reuses the running server').toBe(urls[0]);
    await sql.end();

    // Without clients and lease touches it stops within idle + one check period.
    for (const deadline = Date.now() + idleMs + 30_000; (alive(state.daemonPid) || alive(state.pgPid)) && Date.now() < deadline;) await sleep(200);
    expect(alive(state.pgPid), 'PostgreSQL still runs after the idle bound').toBe(false);
    expect(alive(state.daemonPid)).toBe(false);
    expect(existsSync(join(dir, 'state.json'))).toBe(false);

    // And the next caller starts it again on the same data.
    const again = await ensureIn(dir, idleMs);
    const sql2 = postgres(again, { max: 1, onnotice: () => undefined });
    const rows = await sql2`SELECT 1 FROM pg_database WHERE datname = 'kandev_tpg_probe'`;
    await sql2.end();
    expect(rows).toHaveLength(1);
  }, 150_000);
});
