import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import postgres from 'postgres';
import { connectDb, migrate } from '@kandev/runtime';
import { repoRoot, SERVICE_SCHEMAS } from './paths.js';

/** Where tests look for a PostgreSQL first (trust auth, or a password in the URL). */
export const DEFAULT_TEST_PG_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

/** Whether a superuser connection to `url` works right now. */
async function reachable(url: string): Promise<Error | null> {
  const sql = postgres(url, { max: 1, onnotice: () => undefined, connect_timeout: 3 });
  try {
    await sql`SELECT 1`;
    return null;
  } catch (e) {
    return e as Error;
  } finally {
    await sql.end({ timeout: 1 }).catch(() => undefined);
  }
}

interface TestPgModule {
  ensureTestPostgres(opts?: { dir?: string }): Promise<string>;
}

/**
 * The server tests create their databases on, resolved once per process:
 * - `KANDEV_TEST_PG_URL` when set (used as is; an unreachable one is an error, not a fallback);
 * - else PostgreSQL at 127.0.0.1:5432 when it answers;
 * - else the embedded PostgreSQL of scripts/lib/test-pg.mjs, started once and shared by every
 *   worker, file and package of the run (`KANDEV_TEST_PG=embedded` forces it).
 */
let resolved: Promise<string> | null = null;
export function testPgUrl(): Promise<string> {
  resolved ??= (async () => {
    if (process.env.KANDEV_TEST_PG_URL) return process.env.KANDEV_TEST_PG_URL;
    if (process.env.KANDEV_TEST_PG !== 'embedded') {
      if ((await reachable(DEFAULT_TEST_PG_URL)) === null) return DEFAULT_TEST_PG_URL;
    }
    const mod = (await import(pathToFileURL(join(repoRoot, 'scripts/lib/test-pg.mjs')).href)) as TestPgModule;
    return mod.ensureTestPostgres();
  })();
  resolved.catch(() => (resolved = null));
  return resolved;
}

const withDb = (url: string, db: string) => {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
};

function migrationsHash(): string {
  const h = createHash('sha256');
  for (const s of SERVICE_SCHEMAS) {
    h.update(s.schema);
    if (!existsSync(s.migrationsDir)) continue;
    for (const f of readdirSync(s.migrationsDir).sort()) h.update(f).update(readFileSync(join(s.migrationsDir, f)));
  }
  return h.digest('hex').slice(0, 12);
}

async function admin() {
  const url = await testPgUrl();
  const sql = postgres(url, { max: 1, onnotice: () => undefined, connect_timeout: 5 });
  try {
    await sql`SELECT 1`;
  } catch (e) {
    await sql.end({ timeout: 1 }).catch(() => undefined);
    throw new Error(`the test PostgreSQL is not reachable at ${redact(url)} (KANDEV_TEST_PG_URL overrides it): ${(e as Error).message}`);
  }
  return sql;
}

function redact(url: string): string {
  const u = new URL(url);
  if (u.password) u.password = '****';
  return u.toString();
}

/** Build (once per migration set) a template database with every service schema migrated. */
async function ensureTemplate(): Promise<string> {
  const name = `kandev_tpl_${migrationsHash()}`;
  const sql = await admin();
  try {
    await sql`SELECT pg_advisory_lock(hashtext(${name}))`;
    const ready = await sql`SELECT 1 FROM pg_database WHERE datname = ${name} AND datistemplate`;
    if (ready.length === 0) {
      await sql.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await sql.unsafe(`CREATE DATABASE ${name}`);
      for (const s of SERVICE_SCHEMAS) {
        const db = connectDb(withDb(await testPgUrl(), name), s.schema, { max: 1 });
        try {
          await migrate(db, s.schema, existsSync(s.migrationsDir) ? s.migrationsDir : null);
        } finally {
          await db.end({ timeout: 2 });
        }
      }
      await sql.unsafe(`ALTER DATABASE ${name} WITH is_template true`);
    }
    await sql`SELECT pg_advisory_unlock(hashtext(${name}))`;
  } finally {
    await sql.end({ timeout: 2 });
  }
  return name;
}

export interface TestDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

/** A fresh database for one test file, cloned from the migrated template. */
export async function createTestDatabase(opts: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const template = opts.migrated === false ? 'template0' : await ensureTemplate();
  const name = `kandev_t_${process.pid}_${randomBytes(4).toString('hex')}`;
  const sql = await admin();
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await sql.unsafe(`CREATE DATABASE ${name} TEMPLATE ${template}`);
        break;
      } catch (e) {
        // Concurrent clones of one template collide on "being accessed by other users"; retry.
        if (attempt >= 20 || !/being accessed/.test((e as Error).message)) throw e;
        await new Promise((r) => setTimeout(r, 50 + Math.random() * 100));
      }
    }
  } finally {
    await sql.end({ timeout: 2 });
  }
  return {
    name,
    url: withDb(await testPgUrl(), name),
    drop: async () => {
      const s = await admin();
      try {
        await s.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await s.end({ timeout: 2 });
      }
    },
  };
}
