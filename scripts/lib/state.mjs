// Where `npm start` keeps what must survive a restart: the JWT secret, the embedded PostgreSQL
// data dir, the NATS store and the logs. Shared by start.mjs and token.mjs so both agree on it.
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/** `KANDEV_STATE_DIR` (default `.kandev`), absolute, relative to the working directory. */
export function stateDir(env = process.env) {
  return resolve(process.cwd(), env.KANDEV_STATE_DIR || '.kandev');
}

export const secretFile = (dir) => join(dir, 'secret');

/** The JWT secret: `KANDEV_JWT_SECRET`, else the one stored in the state dir, else null. */
export function readSecret(env = process.env) {
  if (env.KANDEV_JWT_SECRET) return { secret: env.KANDEV_JWT_SECRET, source: 'KANDEV_JWT_SECRET' };
  const file = secretFile(stateDir(env));
  if (existsSync(file)) {
    const secret = readFileSync(file, 'utf8').trim();
    if (secret) return { secret, source: file };
  }
  return null;
}

/** Like readSecret, but generates and stores a random secret (mode 0600) when there is none. */
export function ensureSecret(env = process.env) {
  const found = readSecret(env);
  if (found) return { ...found, created: false };
  const dir = stateDir(env);
  mkdirSync(dir, { recursive: true });
  const secret = randomBytes(32).toString('base64url');
  const file = secretFile(dir);
  // 'wx': never clobber a secret another start wrote in the meantime.
  try {
    writeFileSync(file, secret + '\n', { mode: 0o600, flag: 'wx' });
  } catch (e) {
    if (e?.code !== 'EEXIST') throw e;
    return { ...readSecret(env), created: false };
  }
  return { secret, source: file, created: true };
}

/**
 * PostgreSQL refuses to run as root, so as root the embedded server runs as the `postgres` user,
 * which must be able to traverse into the state dir. Grant o+x on the state dir (never read).
 */
export function makeTraversable(dir) {
  const mode = statSync(dir).mode & 0o777;
  if ((mode & 0o001) === 0) chmodSync(dir, mode | 0o001);
}
