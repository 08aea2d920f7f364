// Where `npm start` keeps what must survive a restart: the two token keys, the embedded PostgreSQL
// data dir, the NATS store and the logs. Shared by start.mjs and token.mjs so both agree on it.
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { readStat } from './proc.mjs';
import { join, resolve } from 'node:path';

/** @typedef {'operator' | 'agent'} KeyKind */

/** `KANDEV_STATE_DIR` (default `.kandev`), absolute, relative to the working directory. */
export function stateDir(env = process.env) {
  return resolve(process.cwd(), env.KANDEV_STATE_DIR || '.kandev');
}

/**
 * The files of the two token keys (ADR 0020). The operator key keeps the name of the single secret
 * npm start used to store (`secret`), so operator tokens printed before the split stay valid.
 */
/** @type {Record<KeyKind, string>} */
export const KEY_FILES = { operator: 'secret', agent: 'agent-secret' };
/** @type {Record<KeyKind, string>} */
export const KEY_VARS = { operator: 'KANDEV_OPERATOR_JWT_SECRET', agent: 'KANDEV_AGENT_JWT_SECRET' };
/** @param {string} dir @param {KeyKind} kind */
export const keyFile = (dir, kind) => join(dir, KEY_FILES[kind]);
/** The operator key's file (kept for callers of the one-secret era). @param {string} dir */
export const secretFile = (dir) => keyFile(dir, 'operator');

/**
 * A token key: its own variable, else `KANDEV_JWT_SECRET` (both keys, INTERFACES.md), else the one
 * stored in the state dir, else null.
 * @param {KeyKind} kind
 * @returns {{ secret: string, source: string } | null}
 */
export function readKey(kind, env = process.env) {
  const own = env[KEY_VARS[kind]];
  if (own) return { secret: own, source: KEY_VARS[kind] };
  if (env.KANDEV_JWT_SECRET) return { secret: env.KANDEV_JWT_SECRET, source: 'KANDEV_JWT_SECRET' };
  const file = keyFile(stateDir(env), kind);
  if (existsSync(file)) {
    const secret = readFileSync(file, 'utf8').trim();
    if (secret) return { secret, source: file };
  }
  return null;
}

/**
 * Like readKey, but generates and stores a random key (32 bytes, mode 0600) when there is none.
 * @param {KeyKind} kind
 * @returns {{ secret: string, source: string, created: boolean }}
 */
export function ensureKey(kind, env = process.env) {
  const found = readKey(kind, env);
  if (found) return { ...found, created: false };
  const dir = stateDir(env);
  mkdirSync(dir, { recursive: true });
  const secret = randomBytes(32).toString('base64url');
  const file = keyFile(dir, kind);
  // 'wx': never clobber a key another start wrote in the meantime.
  try {
    writeFileSync(file, secret + '\n', { mode: 0o600, flag: 'wx' });
  } catch (e) {
    if (/** @type {NodeJS.ErrnoException} */ (e).code !== 'EEXIST') throw e;
    const again = readKey(kind, env);
    if (!again) throw new Error(`${file} exists but holds no key`);
    return { ...again, created: false };
  }
  return { secret, source: file, created: true };
}

/** Both keys, each from its variable, `KANDEV_JWT_SECRET`, its file, or generated. */
export function ensureKeys(env = process.env) {
  return { operator: ensureKey('operator', env), agent: ensureKey('agent', env) };
}

/**
 * PostgreSQL refuses to run as root, so as root the embedded server runs as the `postgres` user,
 * which must be able to traverse into the state dir. Grant o+x on the state dir (never read).
 * @param {string} dir
 */
export function makeTraversable(dir) {
  const mode = statSync(dir).mode & 0o777;
  if ((mode & 0o001) === 0) chmodSync(dir, mode | 0o001);
}

/** A start refused with a message for the operator (printed as it is, no stack). */
export class StartError extends Error {}

/** One `npm start` per state dir: a second one would fight over the PostgreSQL data dir. */
/**
 * @param {string} state the state dir
 * @returns {() => void} releases the lock (if it is still ours)
 */
export function acquireStartLock(state) {
  const lockFile = join(state, 'start.pid');
  if (existsSync(lockFile)) {
    const pid = Number(readFileSync(lockFile, 'utf8').trim());
    const st = pid ? readStat(pid) : null;
    let cmd = '';
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      /* gone */
    }
    if (st && st.state !== 'Z' && cmd.includes('stack.mjs'))
      throw new StartError(`another npm start (pid ${pid}) is using ${state}; stop it first or set KANDEV_STATE_DIR`);
  }
  writeFileSync(lockFile, `${process.pid}\n`);
  return () => {
    try {
      if (readFileSync(lockFile, 'utf8').trim() === String(process.pid)) rmSync(lockFile);
    } catch {
      /* not ours / gone */
    }
  };
}

/**
 * Each service's bus identity key pair (ADR 0055), new for each start (the launcher's): the private
 * keys in <state>/bus-keys/<service>.key (0600, the directory 0700), the public ones in
 * <state>/bus-keys/public-keys. Each service gets its own private key and every public key.
 * @param {string} state the state dir
 * @param {{ privateKeys: Record<string, string>, publicKeys: string }} keys
 */
export function writeBusKeys(state, { privateKeys, publicKeys }) {
  const dir = join(state, 'bus-keys');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  for (const [name, key] of Object.entries(privateKeys)) writeFileSync(join(dir, `${name}.key`), key + '\n', { mode: 0o600 });
  writeFileSync(join(dir, 'public-keys'), publicKeys + '\n', { mode: 0o600 });
}

/**
 * Write the operator token to `<state>/operator-token`, mode 0600 from its creation (a fresh file renamed over the old one).
 * @param {string} dir
 * @param {string} token
 */
export function writeOperatorToken(dir, token) {
  const file = join(dir, 'operator-token');
  const tmp = `${file}.${process.pid}.tmp`;
  rmSync(tmp, { force: true });
  writeFileSync(tmp, token + '\n', { mode: 0o600, flag: 'wx' });
  renameSync(tmp, file);
  return file;
}
