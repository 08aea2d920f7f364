import { afterAll, beforeAll, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Streams, eventSubject, type EventEnvelope } from '@kandev/contracts';
import { createTestDatabase, eventually, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import {
  EventPublisher,
  buildEvent,
  connectDb,
  connectNats,
  consumeEventBatches,
  consumeEvents,
  createLogger,
  ensureEventStream,
  migrate,
  processOnce,
  recordOnce,
  subscribeLiveEvents,
  transaction,
  type NatsConnection,
  type Sql,
} from '../src/index.js';

// How long the published events may take to be applied: a hang guard, not a bound of the consumer.
// This lane runs niced beside e2e's stacks, where 400 deliveries outlasted 10 s once on a busy CI runner.
const EVENTS_SETTLE_MS = 30_000;

const WS = '00000000-0000-4000-8000-000000000001';
const EXEC = '00000000-0000-4000-8000-0000000000e1';
const TURN = '00000000-0000-4000-8000-0000000000f1';
let nats: TestNats;
let nc: NatsConnection;
let db: TestDatabase;
let sql: Sql;
const log = createLogger('test', 'silent');

beforeAll(async () => {
  [nats, db] = await Promise.all([startNats(), createTestDatabase({ migrated: false })]);
  nc = await connectNats({ url: nats.url, name: 'events-test' });
  await ensureEventStream(nc);
  sql = connectDb(db.url, 'evtest');
  await migrate(sql, 'evtest', null);
  await sql`CREATE TABLE effects (event_id text, n int)`;
});
afterAll(async () => {
  await sql?.end();
  await nc?.close();
  await Promise.all([nats?.stop(), db?.drop()]);
});

it('subscribeLiveEvents decodes only the subjects it wants, so an unwatched event costs no parse', async () => {
  const warnings: string[] = [];
  const spyLog = { warn: (_o: unknown, msg: string) => warnings.push(msg) } as unknown as typeof log;
  const asked: string[] = [];
  const received: string[] = [];
  const sub = subscribeLiveEvents(
    nc,
    spyLog,
    (ev) => received.push(ev.type),
    (subject) => (asked.push(subject), subject === eventSubject('turn.started')),
  );
  await nc.flush();
  // Not wanted: a malformed body would have been logged had it been decoded.
  nc.publish(eventSubject('turn.completed'), new TextEncoder().encode('{not json'));
  nc.publish(eventSubject('turn.started'), new TextEncoder().encode('{not json either'));
  const ev = buildEvent('turn.started', { workspace_id: WS }, { execution_id: EXEC, turn_id: TURN });
  nc.publish(eventSubject('turn.started'), new TextEncoder().encode(JSON.stringify(ev)));
  await eventually(async () => received.length > 0, EVENTS_SETTLE_MS);
  expect(received).toEqual(['turn.started']);
  sub.unsubscribe();
  expect(asked).toEqual([eventSubject('turn.completed'), eventSubject('turn.started'), eventSubject('turn.started')]);
  expect(warnings).toEqual(['ignoring malformed live event']); // the wanted malformed one only
});

it('stores an event published twice with the same msgID once', async () => {
  const pub = new EventPublisher(nc);
  const jsm = await jetstreamManager(nc);
  const before = (await jsm.streams.info(Streams.events.name)).state.messages;
  const ev = buildEvent('turn.completed', { workspace_id: WS }, { execution_id: EXEC, turn_id: TURN, stop_reason: 'end_turn' });
  await pub.publish(ev);
  await pub.publish(ev); // a retry after a lost ack
  const after = (await jsm.streams.info(Streams.events.name)).state.messages;
  expect(after - before).toBe(1);
});

it('applies a redelivered event once', async () => {
  const pub = new EventPublisher(nc);
  let deliveries = 0;
  let failFirst = true;
  const consumer = await consumeEvents(nc, { durable: 'test-once', types: ['turn.started'], log, retryDelayMs: 50 }, async (ev) => {
    deliveries++;
    await processOnce(sql, 'test-once', ev.id, async (tx) => {
      await tx`INSERT INTO effects VALUES (${ev.id}, 1)`;
    });
    // Effect committed, then the ack is lost (crash before ack): JetStream redelivers.
    if (failFirst) {
      failFirst = false;
      throw new Error('simulated crash before ack');
    }
  });
  const ev = buildEvent('turn.started', { workspace_id: WS }, { execution_id: EXEC, turn_id: TURN });
  await pub.publish(ev);
  const deadline = Date.now() + 5000;
  while (deliveries < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  await consumer.stop();
  expect(deliveries).toBe(2);
  expect(await sql`SELECT count(*)::int AS n FROM effects WHERE event_id = ${ev.id}`).toEqual([{ n: 1 }]);
});

it('ensureEventStream leaves an existing stream as an operator configured it (issue 11)', async () => {
  const jsm = await jetstreamManager(nc);
  const before = (await jsm.streams.info(Streams.events.name)).config;
  const oneDay = 24 * 3600 * 1_000_000_000;
  await jsm.streams.update(Streams.events.name, { ...before, max_age: oneDay, duplicate_window: 60 * 1_000_000_000 });
  // A start-up with another replica count configured: reported, not applied (a single server cannot
  // hold 3 replicas anyway; on a cluster the operator moves the data).
  await ensureEventStream(nc, { replicas: 3 });
  const after = (await jsm.streams.info(Streams.events.name)).config;
  expect(after).toMatchObject({ max_age: oneDay, duplicate_window: 60 * 1_000_000_000, num_replicas: 1 });
  await jsm.streams.update(Streams.events.name, before);
});

it('consumeEventBatches: one call per session run in delivery order, acked after it, redelivered after a failure, applied once (ADR 0035)', async () => {
  const pub = new EventPublisher(nc);
  await sql`CREATE TABLE batch_effects (n serial, session_id text, event_id text)`;
  const sessions = ['00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-00000000000b'];
  const calls: Array<{ sessions: Set<string>; ids: string[] }> = [];
  let failed: string[] | null = null;
  const consumer = await consumeEventBatches(
    nc,
    { durable: 'test-batches', types: ['turn.completed'], log, retryDelayMs: 50, maxBatch: 100, groupBy: (ev) => ev.session_id ?? ev.id },
    async (evs: EventEnvelope[]) => {
      calls.push({ sessions: new Set(evs.map((e) => e.session_id!)), ids: evs.map((e) => e.id) });
      await transaction(sql, async (tx) => {
        const fresh = await recordOnce(
          tx,
          'test-batches',
          evs.map((e) => e.id),
        );
        for (const ev of evs) if (fresh.has(ev.id)) await tx`INSERT INTO batch_effects (session_id, event_id) VALUES (${ev.session_id ?? null}, ${ev.id})`;
      });
      // The first run committed, then its acks are lost: every message of it comes again.
      if (!failed) {
        failed = evs.map((e) => e.id);
        throw new Error('simulated crash before ack');
      }
    },
  );
  const evs = Array.from(
    { length: 60 },
    (_, i) =>
      buildEvent(
        'turn.completed',
        { workspace_id: WS, session_id: sessions[i % 2]! },
        { execution_id: EXEC, turn_id: TURN, stop_reason: 'end_turn' },
      ) as EventEnvelope,
  );
  // Published without waiting one for another: they arrive together, so runs hold more than one.
  await Promise.all(evs.map((ev) => pub.publish(ev)));
  await eventually(
    async () => {
      const [r] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM batch_effects WHERE event_id = ANY(${evs.map((e) => e.id)})`;
      return r!.n === evs.length && failed !== null && failed.every((id) => calls.filter((c) => c.ids.includes(id)).length >= 2);
    },
    EVENTS_SETTLE_MS,
    20,
  );
  await consumer.stop();
  expect(calls.every((c) => c.sessions.size === 1)).toBe(true);
  expect(calls.some((c) => c.ids.length > 1)).toBe(true);
  const rows = await sql<{ session_id: string; event_id: string }[]>`SELECT session_id, event_id FROM batch_effects ORDER BY n`;
  // Each event once, and each session's events in the order they were published.
  expect(rows).toHaveLength(evs.length);
  for (const s of sessions)
    expect(rows.filter((r) => r.session_id === s).map((r) => r.event_id)).toEqual(evs.filter((e) => e.session_id === s).map((e) => e.id));
});

it('consumeEventBatches: two replicas on one durable, duplicates delivered to either, every event applied once', async () => {
  await sql`CREATE TABLE replica_effects (replica int, event_id text)`;
  const session = '00000000-0000-4000-8000-00000000000c';
  const handler = (replica: number) => async (evs: EventEnvelope[]) => {
    await transaction(sql, async (tx) => {
      const fresh = await recordOnce(
        tx,
        'test-replicas',
        evs.map((e) => e.id),
      );
      for (const id of fresh) await tx`INSERT INTO replica_effects VALUES (${replica}, ${id})`;
    });
  };
  const opts = { durable: 'test-replicas', types: ['turn.started'] as const, log, maxBatch: 10, groupBy: (ev: EventEnvelope) => ev.session_id ?? ev.id };
  const replicas = [await consumeEventBatches(nc, opts, handler(1)), await consumeEventBatches(nc, opts, handler(2))];
  const evs = Array.from(
    { length: 200 },
    () => buildEvent('turn.started', { workspace_id: WS, session_id: session }, { execution_id: EXEC, turn_id: TURN }) as EventEnvelope,
  );
  // Each event published twice under different Nats-Msg-Ids (what a redelivery looks like): the copies may reach either replica.
  const js = jetstream(nc);
  const enc = new TextEncoder();
  await Promise.all(evs.flatMap((ev) => [0, 1].map(() => js.publish('kandev.evt.turn.started', enc.encode(JSON.stringify(ev)), { msgID: randomUUID() }))));
  const ids = evs.map((e) => e.id);
  await eventually(
    async () => (await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM replica_effects WHERE event_id = ANY(${ids})`)[0]!.n === ids.length,
    EVENTS_SETTLE_MS,
    20,
  );
  // Both queues drained (every copy handled), then nothing more was applied.
  await eventually(
    async () => (await jetstreamManager(nc).then((m) => m.consumers.info(Streams.events.name, 'test-replicas'))).num_ack_pending === 0,
    EVENTS_SETTLE_MS,
    20,
  );
  await Promise.all(replicas.map((r) => r.stop()));
  const rows = await sql<{ event_id: string; n: number }[]>`SELECT event_id, count(*)::int AS n FROM replica_effects GROUP BY event_id`;
  expect(rows).toHaveLength(ids.length);
  expect(rows.every((r) => r.n === 1)).toBe(true);
});
