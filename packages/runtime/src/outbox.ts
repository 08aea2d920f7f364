import { eventSubject, type EventDataOf, type EventEnvelope, type EventType } from '@kandev/contracts';
import type { EventPublisher, EventScope } from './events.js';
import { buildEvent } from './events.js';
import type { Sql, Tx } from './db.js';
import type { Logger } from './log.js';
import { repeatEvery } from './repeat.js';
import { readOnScrape } from './metrics.js';
import { traceHeaders } from './tracing.js';

/**
 * Transactional outbox: events are written in the same transaction as the state they describe,
 * published right after commit (fast path), and re-published by a relay if that failed. So a
 * crash between commit and publish never loses an event; JetStream's msgID dedupe absorbs the
 * double publish a crash after publish can cause.
 */
export class Outbox {
  constructor(
    private readonly sql: Sql,
    private readonly publisher: EventPublisher,
    private readonly log: Logger,
  ) {}

  /** Stage an event inside `tx`. Call `flush` with the result after the transaction commits. */
  async add<T extends EventType>(tx: Tx, type: T, scope: EventScope, data: EventDataOf<T>): Promise<EventEnvelope<T>> {
    const ev = buildEvent(type, scope, data);
    await this.addMany(tx, [ev as EventEnvelope]);
    return ev;
  }

  /**
   * Write already-built events inside `tx` in one statement (a transaction that changes a whole
   * tree stages hundreds of events; one round trip instead of one per event).
   */
  async addMany(tx: Tx, events: ReadonlyArray<EventEnvelope>): Promise<void> {
    if (!events.length) return;
    const trace = traceHeaders();
    const rows = events.map((ev) => ({ id: ev.id, subject: eventSubject(ev.type), payload: ev, trace }));
    await tx`INSERT INTO outbox (id, subject, payload, trace)
             SELECT r.id, r.subject, r.payload, r.trace FROM jsonb_to_recordset(${tx.json(rows as never)}) AS r(id text, subject text, payload jsonb, trace jsonb)`;
  }

  /** Publish staged events now; failures are left for the relay. */
  async flush(events: ReadonlyArray<EventEnvelope>): Promise<void> {
    if (!events.length) return;
    // Published together: one connection keeps them in order on the server, and a transaction
    // that staged hundreds of events does not wait for one acknowledgement after another.
    const outcomes = await Promise.allSettled(events.map((ev) => this.publisher.publish(ev)));
    const published: string[] = [];
    outcomes.forEach((o, i) => {
      const ev = events[i]!;
      if (o.status === 'fulfilled') published.push(ev.id);
      else this.log.warn({ err: o.reason, event_id: ev.id, type: ev.type }, 'event publish failed; relay will retry');
    });
    // Not awaited: the events are out; a lost mark only means the relay republishes them later,
    // and JetStream's msgID dedupe drops the copy. Keeps a round trip off every command's path.
    if (published.length) {
      this.sql`UPDATE outbox SET published_at = now() WHERE id = ANY(${published}) AND published_at IS NULL`.catch((e: unknown) =>
        this.log.warn({ err: e }, 'marking events published failed; relay will republish'),
      );
    }
  }

  /** Re-publish whatever a crashed or failed flush left behind. */
  async relayOnce(limit = 200): Promise<number> {
    const rows = await this.sql<{ id: string; payload: EventEnvelope; trace: Record<string, string> }[]>`
      SELECT id, payload, trace FROM outbox WHERE published_at IS NULL AND created_at < now() - interval '1 second'
      ORDER BY created_at LIMIT ${limit}`;
    for (const r of rows) {
      await this.publisher.publish(r.payload, r.trace);
      await this.sql`UPDATE outbox SET published_at = now() WHERE id = ${r.id}`;
    }
    return rows.length;
  }

  /** Serve the age of the oldest unpublished event as `kandev_outbox_oldest_age_seconds`, read at scrape time. */
  exportAge(): void {
    readOnScrape('kandev_outbox_oldest_age_seconds', async () => {
      const [row] = await this.sql<
        { age: number | null }[]
      >`SELECT extract(epoch FROM now() - min(created_at))::float8 AS age FROM outbox WHERE published_at IS NULL`;
      return Math.max(0, row?.age ?? 0);
    });
  }

  startRelay(intervalMs = 1_000): void {
    this.stopRelay = repeatEvery(
      intervalMs,
      () => this.relayOnce(),
      (e) => this.log.warn({ err: e }, 'outbox relay failed'),
      'outbox.relay',
    );
  }
  /** Stops the relay started by startRelay (a relay pass in flight finishes, and schedules none after it). */
  stopRelay: () => void = () => undefined;
}
