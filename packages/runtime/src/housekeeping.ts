import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { Streams } from '@kandev/contracts';
import { purgeInbox, purgeOutbox, type Sql } from './db.js';
import type { Logger } from './log.js';
import { repeatEvery } from './repeat.js';

/** How long a published outbox row is kept: long enough to look into what went out, and when. */
export const OUTBOX_KEEP_MS = 3_600_000;
/** How often a service purges its outbox and inbox. Rows live an hour or days; a minute is plenty. */
export const HOUSEKEEPING_INTERVAL_MS = 60_000;
/** Kept beyond the stream's own retention, so no event the stream still holds has lost its inbox row. */
const INBOX_MARGIN_MS = 24 * 3_600_000;

/**
 * How long an inbox row must be kept: as long as the event stream keeps the event it guards (the
 * stream's `max_age` as it is configured now, an operator may have changed it), plus a day. Null
 * when the stream keeps events forever (max_age 0): then every row may still be needed.
 */
export async function inboxKeepMs(nc: NatsConnection): Promise<number | null> {
  const jsm = await jetstreamManager(nc);
  const maxAgeNs = (await jsm.streams.info(Streams.events.name)).config.max_age ?? 0;
  return maxAgeNs > 0 ? maxAgeNs / 1_000_000 + INBOX_MARGIN_MS : null;
}

/** One pass: published outbox rows past OUTBOX_KEEP_MS, inbox rows past inboxKeepMs. */
export async function housekeepOnce(sql: Sql, nc: NatsConnection): Promise<{ outbox: number; inbox: number }> {
  const outbox = await purgeOutbox(sql, OUTBOX_KEEP_MS);
  const keep = await inboxKeepMs(nc);
  const inbox = keep === null ? 0 : await purgeInbox(sql, keep);
  return { outbox, inbox };
}

/** Runs housekeepOnce every HOUSEKEEPING_INTERVAL_MS until the returned function is called. */
export function startHousekeeping(sql: Sql, nc: NatsConnection, log: Logger, intervalMs = HOUSEKEEPING_INTERVAL_MS): () => void {
  return repeatEvery(
    intervalMs,
    async () => {
      const purged = await housekeepOnce(sql, nc);
      if (purged.outbox || purged.inbox) log.debug({ purged }, 'outbox and inbox purged');
    },
    (e) => log.warn({ err: e }, 'outbox and inbox purge failed; tried again next time'),
    'housekeeping',
  );
}
