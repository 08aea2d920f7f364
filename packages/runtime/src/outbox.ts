import { eventSubject, type EventDataOf, type EventEnvelope, type EventType } from '@kandev/contracts';
import type { EventPublisher, EventScope } from './events.js';
import { buildEvent } from './events.js';
import type { Sql, Tx } from './db.js';
import type { Logger } from './log.js';
import { traceHeaders } from './tracing.js';

/**
 * Transactional outbox: events are written in the same transaction as the state they describe,
 * published right after commit (fast path), and re-published by a relay if that failed. So a
 * crash between commit and publish never loses an event; JetStream's msgID dedupe absorbs the
 * double publish a crash after publish can cause.
 */
export class Outbox {
  private relayTimer: NodeJS.Timeout | undefined;
  constructor(
    private readonly sql: Sql,
    private readonly publisher: EventPublisher,
    private readonly log: Logger,
  ) {}

  /** Stage an event inside `tx`. Call `flush` with the result after the transaction commits. */
  async add<T extends EventType>(tx: Tx, type: T, scope: EventScope, data: EventDataOf<T>): Promise<EventEnvelope<T>> {
    const ev = buildEvent(type, scope, data);
    await tx`INSERT INTO outbox (id, subject, payload, trace) VALUES (${ev.id}, ${eventSubject(type)}, ${tx.json(ev as never)}, ${tx.json(traceHeaders() as never)})`;
    return ev;
  }

  /** Publish staged events now; failures are left for the relay. */
  async flush(events: ReadonlyArray<EventEnvelope>): Promise<void> {
    if (!events.length) return;
    const published: string[] = [];
    // All at once: one connection keeps their order in the stream, and the acks come back together.
    await Promise.all(
      events.map(async (ev) => {
        try {
          await this.publisher.publish(ev);
          published.push(ev.id);
        } catch (e) {
          this.log.warn({ err: e, event_id: ev.id, type: ev.type }, 'event publish failed; relay will retry');
        }
      }),
    );
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
    await this.sql`DELETE FROM outbox WHERE published_at < now() - interval '1 hour'`;
    return rows.length;
  }

  startRelay(intervalMs = 1_000): void {
    const tick = async () => {
      try {
        await this.relayOnce();
      } catch (e) {
        this.log.warn({ err: e }, 'outbox relay failed');
      }
      this.relayTimer = setTimeout(tick, intervalMs);
      this.relayTimer.unref();
    };
    this.relayTimer = setTimeout(tick, intervalMs);
    this.relayTimer.unref();
  }
  stopRelay(): void {
    if (this.relayTimer) clearTimeout(this.relayTimer);
  }
}
