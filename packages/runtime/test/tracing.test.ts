import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SpanKind } from '@opentelemetry/api';
import { z } from 'zod';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { instanceEndpoint, type Endpoint } from '@kandev/contracts';
import { createTestDatabase, eventually, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import {
  ATTR_DB_COLLECTION_NAME,
  ATTR_DB_NAMESPACE,
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_QUERY_SUMMARY,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_MESSAGING_DESTINATION_NAME,
  ATTR_MESSAGING_DESTINATION_TEMPLATE,
  ATTR_MESSAGING_OPERATION_TYPE,
  ATTR_MESSAGING_SYSTEM,
  ATTR_MESSAGING_SYSTEM_NAME,
  connectDb,
  connectNats,
  createLogger,
  inSpan,
  initTracing,
  on,
  request,
  serveEndpoints,
  shutdownTracing,
  summarizeStatement,
  transaction,
  type NatsConnection,
  type Sql,
} from '../src/index.js';

const exporter = new InMemorySpanExporter();
// A file run before this one in the same worker (isolate: false) may have left its provider.
await shutdownTracing();
await initTracing({ serviceName: 'trace-test', exporter });

const first: Endpoint = { name: 'test.first', subject: 'kandev.test.first', request: z.object({}), result: z.object({ ok: z.boolean() }) };
const second: Endpoint = { name: 'test.second', subject: 'kandev.test.second', request: z.object({}), result: z.object({ ok: z.boolean() }) };
const owned = instanceEndpoint('lifecycle', 'test.owned', z.object({}), z.object({ ok: z.boolean() }));

let nats: TestNats;
let nc: NatsConnection;
beforeAll(async () => {
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: 'trace-test' });
  const log = createLogger('test', 'silent');
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'a', queue: 'q', log }, [
    // The first hop calls the second: the context must follow through the NATS headers.
    on(first, async () => request(nc, second, {})),
    on(second, async () => ({ ok: true })),
    on(owned.at('life-3f2a'), async () => ({ ok: true })),
  ]);
});
afterAll(async () => {
  await nc?.close();
  await nats?.stop();
  await shutdownTracing();
});

it('carries W3C trace context across two NATS hops', async () => {
  exporter.reset();
  await request(nc, first, {});
  // The first handler's span ends just after its reply is sent: wait for it.
  const spans = await eventually(
    async () => (exporter.getFinishedSpans().some((s) => s.name === 'process kandev.test.first') ? exporter.getFinishedSpans() : null),
    5_000,
    10,
  );
  const byName = (n: string) => spans.find((s) => s.name === n)!;
  const send1 = byName('send kandev.test.first');
  const proc1 = byName('process kandev.test.first');
  const send2 = byName('send kandev.test.second');
  const proc2 = byName('process kandev.test.second');
  for (const s of [send1, proc1, send2, proc2]) expect(s, 'span missing').toBeDefined();
  const traceId = send1.spanContext().traceId;
  for (const s of [proc1, send2, proc2]) expect(s.spanContext().traceId).toBe(traceId);
  expect(proc1.parentSpanContext?.spanId).toBe(send1.spanContext().spanId);
  expect(send2.parentSpanContext?.spanId).toBe(proc1.spanContext().spanId);
  expect(proc2.parentSpanContext?.spanId).toBe(send2.spanContext().spanId);
});

it('names and describes NATS spans per the messaging conventions, ids only in attributes', async () => {
  exporter.reset();
  await request(nc, first, {});
  await request(nc, owned.at('life-3f2a'), {});
  // A handler's span ends just after its reply is sent: wait for the last one.
  const spans = await eventually(
    async () => (exporter.getFinishedSpans().some((s) => s.name === 'process kandev.lifecycle.*.test.owned') ? exporter.getFinishedSpans() : null),
    5_000,
    10,
  );
  const byName = (n: string) => spans.find((s) => s.name === n)!;
  const send = byName('send kandev.test.first');
  const proc = byName('process kandev.test.first');
  for (const s of [send, proc]) {
    expect(s.attributes[ATTR_MESSAGING_SYSTEM_NAME]).toBe('nats');
    expect(s.attributes[ATTR_MESSAGING_SYSTEM]).toBe('nats');
    expect(s.attributes[ATTR_MESSAGING_DESTINATION_NAME]).toBe('kandev.test.first');
  }
  expect(send.attributes[ATTR_MESSAGING_OPERATION_TYPE]).toBe('send');
  expect(proc.attributes[ATTR_MESSAGING_OPERATION_TYPE]).toBe('process');
  expect(typeof proc.attributes['kandev.request_id']).toBe('string');
  // An instance's subject: the template in the name, the subject itself in the attributes.
  for (const s of [byName('send kandev.lifecycle.*.test.owned'), byName('process kandev.lifecycle.*.test.owned')]) {
    expect(s.attributes[ATTR_MESSAGING_DESTINATION_NAME]).toBe('kandev.lifecycle.life-3f2a.test.owned');
    expect(s.attributes[ATTR_MESSAGING_DESTINATION_TEMPLATE]).toBe('kandev.lifecycle.*.test.owned');
  }
});

describe('PostgreSQL spans', () => {
  let db: TestDatabase;
  let sql: Sql;
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
    sql = connectDb(db.url, 'public');
    await sql`CREATE TABLE IF NOT EXISTS traced_items (id int PRIMARY KEY, secret text)`;
  });
  afterAll(async () => {
    await sql?.end({ timeout: 2 });
    await db?.drop();
  });

  it('opens a CLIENT span per statement, named by its summary, with no value of the statement in it', async () => {
    exporter.reset();
    const secret = 'do-not-export-me';
    const parent = await inSpan('caller', {}, async (span) => {
      await sql`SELECT id FROM traced_items WHERE secret = ${secret}`;
      await transaction(sql, async (tx) => {
        await tx`INSERT INTO traced_items ${tx({ id: 1, secret })} ON CONFLICT (id) DO UPDATE SET secret = ${secret}`;
        await tx`UPDATE traced_items SET secret = ${secret} WHERE id = ${1}`;
      });
      await sql.unsafe('DELETE FROM traced_items WHERE id = $1', [1]);
      await expect(sql`SELECT 1 FROM no_such_table`).rejects.toThrow();
      return span.spanContext();
    });
    const spans = exporter.getFinishedSpans();
    const named = (n: string) => {
      const s = spans.find((x) => x.name === n);
      expect(s, `span ${n}; have ${spans.map((x) => x.name).join(', ')}`).toBeDefined();
      return s!;
    };
    const select = named('SELECT traced_items');
    expect(select.kind).toBe(SpanKind.CLIENT);
    expect(select.attributes[ATTR_DB_SYSTEM_NAME]).toBe('postgresql');
    expect(select.attributes[ATTR_DB_OPERATION_NAME]).toBe('SELECT');
    expect(select.attributes[ATTR_DB_COLLECTION_NAME]).toBe('traced_items');
    expect(select.attributes[ATTR_DB_QUERY_SUMMARY]).toBe('SELECT traced_items');
    expect(String(select.attributes[ATTR_DB_NAMESPACE])).toMatch(/\|public$/);
    expect(select.parentSpanContext?.spanId).toBe(parent.spanId);
    // Statements inside a transaction are spans of the caller's trace too.
    expect(named('INSERT traced_items').spanContext().traceId).toBe(parent.traceId);
    expect(named('UPDATE traced_items').parentSpanContext?.spanId).toBe(parent.spanId);
    expect(named('DELETE traced_items').attributes[ATTR_DB_OPERATION_NAME]).toBe('DELETE');
    const failed = named('SELECT no_such_table');
    expect(failed.attributes[ATTR_ERROR_TYPE]).toBe('42P01');
    expect(failed.status.code).toBe(2); // SpanStatusCode.ERROR
    for (const s of spans) expect(JSON.stringify(s.attributes)).not.toContain(secret);
  });

  it('summarizes statements by operation and first table', () => {
    expect(summarizeStatement('  SELECT a FROM tasks t JOIN sessions s ON s.task_id = t.id WHERE t.id = $1').name).toBe('SELECT tasks');
    expect(summarizeStatement('WITH x AS (SELECT 1) UPDATE sessions SET a = $1').name).toBe('UPDATE sessions');
    expect(summarizeStatement('SELECT * FROM unnest($1::text[]) AS u(id)').name).toBe('SELECT');
    expect(summarizeStatement('INSERT INTO "outbox" (id) VALUES ($1)').attributes[ATTR_DB_COLLECTION_NAME]).toBe('outbox');
    expect(summarizeStatement("SELECT set_config('lock_timeout', $1, true)").name).toBe('SELECT');
    expect(summarizeStatement('WITH picked AS (SELECT id FROM wakeups WHERE x FOR UPDATE SKIP LOCKED) UPDATE wakeups w SET a = $1 FROM picked').name).toBe(
      'UPDATE wakeups',
    );
    expect(summarizeStatement("SELECT id FROM sessions WHERE state = 'FROM x' FOR UPDATE").name).toBe('SELECT sessions');
    expect(summarizeStatement('DELETE FROM outbox WHERE (id) IN (SELECT id FROM outbox WHERE a < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)').name).toBe(
      'DELETE outbox',
    );
  });
});
