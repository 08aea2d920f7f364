import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { Streams } from '@kandev/contracts';
import { createTestDatabase, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import {
  connectDb,
  connectNats,
  ensureEventStream,
  EVENT_RETENTION_MS,
  housekeepOnce,
  inboxKeepMs,
  migrate,
  purgeInbox,
  purgeOutbox,
  purgeStatement,
  type NatsConnection,
  type Sql,
} from '../src/index.js';

const HOUR = 3_600_000;
let nats: TestNats;
let nc: NatsConnection;
let db: TestDatabase;
let sql: Sql;

beforeAll(async () => {
  [nats, db] = await Promise.all([startNats(), createTestDatabase({ migrated: false })]);
  nc = await connectNats({ url: nats.url, name: 'housekeeping-test' });
  await ensureEventStream(nc);
  sql = connectDb(db.url, 'hktest');
  await migrate(sql, 'hktest', null);
});
afterAll(async () => {
  await sql?.end();
  await nc?.close();
  await Promise.all([nats?.stop(), db?.drop()]);
});

/** Outbox rows `id-<n>`, published `publishedAgoMs` ago (null: not published), created two hours ago. */
async function outboxRows(prefix: string, count: number, publishedAgoMs: number | null) {
  await sql.unsafe(
    `INSERT INTO outbox (id, subject, payload, created_at, published_at)
     SELECT $1 || g, 'kandev.evt.test', '{}'::jsonb, now() - interval '2 hours', CASE WHEN $2::float8 IS NULL THEN NULL ELSE now() - make_interval(secs => $2::float8) END
     FROM generate_series(1, $3::int) AS g`,
    [prefix, publishedAgoMs === null ? null : publishedAgoMs / 1000, count],
  );
}
const outboxIds = async (prefix: string) => (await sql<{ id: string }[]>`SELECT id FROM outbox WHERE id LIKE ${prefix + '%'}`).length;

describe('outbox purge', () => {
  it('deletes published rows older than the bound in batches, and keeps newer and unpublished ones', async () => {
    await outboxRows('old-', 7, 2 * HOUR);
    await outboxRows('recent-', 3, 10 * 60_000);
    await outboxRows('unpublished-', 4, null); // created two hours ago, never published: the relay's, never the purge's
    expect(await purgeOutbox(sql, HOUR, { batch: 3 })).toBe(7);
    expect([await outboxIds('old-'), await outboxIds('recent-'), await outboxIds('unpublished-')]).toEqual([0, 3, 4]);
    expect(await purgeOutbox(sql, HOUR, { batch: 3 })).toBe(0);
  });

  it('stops after maxRows, leaving the rest to the next pass', async () => {
    await outboxRows('many-', 10, 2 * HOUR);
    expect(await purgeOutbox(sql, HOUR, { batch: 4, maxRows: 6 })).toBe(6);
    expect(await outboxIds('many-')).toBe(4);
    expect(await purgeOutbox(sql, HOUR)).toBe(4);
  });

  it.each(['outbox', 'inbox'] as const)('finds the %s rows it deletes through an index, not a scan of the table', async (table) => {
    // Enough rows that a scan would read them all; none old enough to go.
    if (table === 'outbox') await outboxRows('fresh-', 20_000, 60_000);
    else await sql`INSERT INTO inbox (consumer, event_id) SELECT 'c', 'e' || g FROM generate_series(1, 20000) AS g`;
    await sql.unsafe(`ANALYZE ${table}`);
    const plan = JSON.stringify(await sql.unsafe(`EXPLAIN (FORMAT JSON) ${purgeStatement(table)}`, [HOUR / 1000, 1000]));
    expect(plan).toContain(table === 'outbox' ? 'outbox_published' : 'inbox_processed');
    expect(plan).not.toContain('"Seq Scan"');
  });
});

describe('inbox purge', () => {
  it('deletes rows older than the bound only', async () => {
    await sql`DELETE FROM inbox`; // the count below is of every row it purges, whatever ran before
    await sql`INSERT INTO inbox (consumer, event_id, processed_at) SELECT 'c', 'stale-' || g, now() - interval '10 days' FROM generate_series(1, 5) AS g`;
    await sql`INSERT INTO inbox (consumer, event_id, processed_at) SELECT 'c', 'kept-' || g, now() - interval '2 days' FROM generate_series(1, 2) AS g`;
    expect(await purgeInbox(sql, 8 * 24 * HOUR, { batch: 2 })).toBe(5);
    const left = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM inbox WHERE event_id LIKE 'stale-%' OR event_id LIKE 'kept-%'`;
    expect(left[0]!.n).toBe(2);
  });

  it('keeps inbox rows as long as the stream keeps events, as it is configured now, plus a day', async () => {
    expect(await inboxKeepMs(nc)).toBe(EVENT_RETENTION_MS + 24 * HOUR);
    const jsm = await jetstreamManager(nc);
    const cfg = (await jsm.streams.info(Streams.events.name)).config;
    try {
      await jsm.streams.update(Streams.events.name, { ...cfg, max_age: 30 * 24 * HOUR * 1_000_000 }); // an operator's longer retention
      expect(await inboxKeepMs(nc)).toBe(31 * 24 * HOUR);
      await sql`INSERT INTO inbox (consumer, event_id, processed_at) VALUES ('c', 'within-30-days', now() - interval '10 days')`;
      await housekeepOnce(sql, nc);
      expect(await sql`SELECT event_id FROM inbox WHERE event_id = 'within-30-days'`).toHaveLength(1);
      await jsm.streams.update(Streams.events.name, { ...cfg, max_age: 0 }); // kept forever: nothing may go
      expect(await inboxKeepMs(nc)).toBeNull();
    } finally {
      await jsm.streams.update(Streams.events.name, cfg);
    }
  });
});
