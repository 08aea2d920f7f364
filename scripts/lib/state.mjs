// Where `npm start` keeps what must survive a restart: the two token keys, the embedded PostgreSQL
// data dir, the NATS store and the logs. Shared by start.mjs and token.mjs so both agree on it.
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
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
