import postgres from 'postgres';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from './log.js';
import { transaction } from './transaction.js';
import { connectionAttributes, tracedSql } from './db-tracing.js';
import { tracingRecords } from './tracing.js';

export type Sql = postgres.Sql<Record<string, never>>;
export type Tx = postgres.TransactionSql<Record<string, never>>;
export type { postgres };

/** postgres.js's `debug` hook: called with each statement as it is written to its connection (tests record the order statements go out in). */
export type DbDebug = (connection: number, query: string, parameters: unknown[]) => void;

/**
 * One pool per service, confined to the service's own schema through search_path. Its connections
 * are named `kandev-<schema>:<instance>` in `pg_stat_activity` (the NATS connection's name too), so
 * an operator can tell which replica holds a lock or runs a slow statement; PostgreSQL keeps the
 * first 63 bytes.
 */
export function connectDb(url: string, schema: string, opts: { max?: number; debug?: DbDebug; instanceId?: string } = {}): Sql {
  assertIdent(schema);
  const sql = postgres(url, {
    max: opts.max ?? 10,
    ...(opts.debug ? { debug: opts.debug as never } : {}),
    idle_timeout: 30,
    connect_timeout: 10,
    onnotice: () => undefined,
    connection: { search_path: `${schema},public`, application_name: opts.instanceId ? `kandev-${schema}:${opts.instanceId}` : `kandev-${schema}` },
    transform: { undefined: null },
    types: {
      // Timestamps travel as ISO strings; numeric sums as JS numbers.
      timestamptz: {
        to: 1184,
        from: [1184, 1114],
        serialize: (x: string | Date) => (x instanceof Date ? x.toISOString() : x),
        parse: (x: string) => new Date(x).toISOString(),
      },
    } as never,
  }) as unknown as Sql;
  // A span per statement where spans are recorded (docs/operations.md, "Traces"); otherwise the
  // driver's own pool, with nothing in the way of a statement.
  return tracingRecords() ? tracedSql(sql, connectionAttributes(url, schema)) : sql;
}

function assertIdent(name: string) {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`invalid schema name ${name}`);
}

/** Tables every service schema gets: the transactional outbox and the consumer inbox (B-5). */
const RUNTIME_MIGRATIONS: Array<{ name: string; sql: string }> = [
  {
    name: '000_runtime_outbox_inbox.sql',
    sql: `
      CREATE TABLE IF NOT EXISTS outbox (
        id text PRIMARY KEY,
        subject text NOT NULL,
        payload jsonb NOT NULL,
        trace jsonb NOT NULL DEFAULT '{}'::jsonb,
        created_at timestamptz NOT NULL DEFAULT now(),
        published_at timestamptz
      );
      CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (created_at) WHERE published_at IS NULL;
      CREATE TABLE IF NOT EXISTS inbox (
        consumer text NOT NULL,
        event_id text NOT NULL,
        processed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (consumer, event_id)
      );`,
  },
  {
    // The purges (purgeOutbox, purgeInbox) find their rows through these, not through a scan of the
    // whole table every time: the outbox keeps an hour of published events (120,000 rows, 285 MB
    // after one tree-hold bench, and a 1.8 s scan that ran every second).
    name: '000_runtime_outbox_inbox_purge.sql',
    sql: `
      CREATE INDEX IF NOT EXISTS outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;
      CREATE INDEX IF NOT EXISTS inbox_processed ON inbox (processed_at);`,
  },
];

/**
 * Apply the ordered migrations of `dir` (NNN_name.sql) to `schema`, once. Replicas starting at
 * the same moment serialise on an advisory lock, so each migration runs exactly once.
 */
export async function migrate(sql: Sql, schema: string, dir: string | null, log?: Logger): Promise<string[]> {
  assertIdent(schema);
  const files: Array<{ name: string; sql: string }> = [...RUNTIME_MIGRATIONS];
  if (dir) {
    const names = (await readdir(dir)).filter((f) => /^\d{3}_.+\.sql$/.test(f)).sort();
    for (const name of names) files.push({ name, sql: await readFile(join(dir, name), 'utf8') });
  }
  const applied: string[] = [];
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(hashtext(${'kandev-migrate:' + schema}))`;
    await tx.unsafe(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await tx.unsafe(`SET LOCAL search_path TO ${schema}, public`);
    await tx.unsafe(`CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
    const done = new Set((await tx<{ name: string }[]>`SELECT name FROM schema_migrations`).map((r) => r.name));
    for (const f of files) {
      if (done.has(f.name)) continue;
      await tx.unsafe(f.sql);
      await tx`INSERT INTO schema_migrations (name) VALUES (${f.name})`;
      applied.push(f.name);
    }
  });
  if (applied.length) log?.info({ schema, applied }, 'migrations applied');
  return applied;
}

/** The tables a purge empties, each with its key and the time column its rows age by (indexed). */
const PURGEABLE = {
  outbox: { key: 'id', column: 'published_at' },
  inbox: { key: 'consumer, event_id', column: 'processed_at' },
} as const;

/**
 * One batch of a purge: up to $2 rows of `table` older than $1 seconds, oldest first. Rows another
 * replica's purge has locked are skipped, not waited for.
 */
export function purgeStatement(table: keyof typeof PURGEABLE): string {
  const { key, column } = PURGEABLE[table];
  return `DELETE FROM ${table} WHERE (${key}) IN (SELECT ${key} FROM ${table} WHERE ${column} < now() - make_interval(secs => $1) ORDER BY ${column} LIMIT $2 FOR UPDATE SKIP LOCKED)`;
}

/**
 * Deletes rows of `table` older than `olderThanMs` in batches of `batch` (each its own short
 * statement: no purge holds many row locks or keeps writers waiting for long), until a batch comes
 * back short or `maxRows` are gone. Returns how many rows it deleted.
 */
async function purgeOlderThan(sql: Sql, table: keyof typeof PURGEABLE, olderThanMs: number, opts: { batch?: number; maxRows?: number } = {}): Promise<number> {
  const batch = opts.batch ?? 1_000;
  const maxRows = opts.maxRows ?? 100_000;
  let deleted = 0;
  while (deleted < maxRows) {
    const limit = Math.min(batch, maxRows - deleted);
    const rows = await sql.unsafe(purgeStatement(table), [olderThanMs / 1000, limit]);
    deleted += rows.count;
    if (rows.count < limit) break;
  }
  return deleted;
}

/** Outbox rows published more than `olderThanMs` ago (kept that long to look into what went out). */
export const purgeOutbox = (sql: Sql, olderThanMs: number, opts?: { batch?: number; maxRows?: number }) => purgeOlderThan(sql, 'outbox', olderThanMs, opts);

/**
 * Inbox rows older than `olderThanMs`. Safe once that is longer than the event stream keeps a
 * message (`inboxKeepMs`): an event the stream no longer holds cannot be redelivered, so its
 * id no longer guards anything. Without it the inbox grows by a row per consumed event, forever.
 */
export const purgeInbox = (sql: Sql, olderThanMs: number, opts?: { batch?: number; maxRows?: number }) => purgeOlderThan(sql, 'inbox', olderThanMs, opts);

/**
 * The ids of `eventIds` this consumer had not recorded, recorded now inside `tx` (one statement,
 * repeats within `eventIds` counted once): the batch form of processOnce, for a handler that
 * applies a run of events in one transaction. Rows are inserted in id order, so two transactions
 * whose runs share ids (a redelivery reaching the other replica) wait on each other, never deadlock.
 */
export async function recordOnce(tx: Tx, consumer: string, eventIds: readonly string[]): Promise<Set<string>> {
  if (!eventIds.length) return new Set();
  const rows = await tx<{ event_id: string }[]>`
    INSERT INTO inbox (consumer, event_id)
    SELECT ${consumer}, id FROM (SELECT DISTINCT unnest(${eventIds as string[]}::text[]) AS id) ids ORDER BY id
    ON CONFLICT DO NOTHING RETURNING event_id`;
  return new Set(rows.map((r) => r.event_id));
}

/**
 * Exactly-once effects over at-least-once delivery: run `effect` in the same transaction that
 * records the event id for this consumer; a redelivered event finds its id and does nothing.
 */
export async function processOnce(sql: Sql, consumer: string, eventId: string, effect: (tx: Tx) => Promise<void>): Promise<boolean> {
  return transaction(sql, async (tx) => {
    const rows = await tx`INSERT INTO inbox (consumer, event_id) VALUES (${consumer}, ${eventId}) ON CONFLICT DO NOTHING RETURNING event_id`;
    if (rows.length === 0) return false;
    await effect(tx);
    return true;
  });
}
