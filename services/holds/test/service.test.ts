import { afterAll, beforeAll, expect, it } from 'vitest';
import postgres from 'postgres';
import { pingEndpoint } from '@kandev/contracts';
import { connectNats, request, startService, type NatsConnection, type RunningService } from '@kandev/runtime';
import { createTestDatabase, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import { holdsService } from '../src/service.js';

/** The holds service starts, owns its migrated schema and answers pings. */
let nats: TestNats;
let db: TestDatabase;
let svc: RunningService;
let nc: NatsConnection;
beforeAll(async () => {
  [nats, db] = await Promise.all([startNats(), createTestDatabase({ migrated: false })]);
  svc = await startService(holdsService, { ...process.env, NATS_URL: nats.url, DATABASE_URL: db.url, LOG_LEVEL: 'silent', INSTANCE_ID: 'holds-t' });
  nc = await connectNats({ url: nats.url, name: 'holds-test' });
});
afterAll(async () => {
  await nc?.close();
  await svc?.stop();
  await Promise.all([nats?.stop(), db?.drop()]);
});

it('migrates its own schema and answers its ping', async () => {
  await expect(request(nc, pingEndpoint('holds'), {})).resolves.toEqual({
    service: 'holds',
    instance_id: 'holds-t',
    // A bare test nats-server and no bus keys (ADR 0054, 0055).
    details: { nats_auth: 'none', bus_identity: 'off' },
  });
  const sql = postgres(db.url, { max: 1 });
  try {
    const tables = await sql`SELECT table_name FROM information_schema.tables WHERE table_schema = 'holds' ORDER BY table_name`;
    expect(tables.map((t) => t.table_name)).toEqual([
      'cost_events',
      'held_tasks',
      'hold_gates',
      'inbox',
      'outbox',
      'schema_migrations',
      'task_costs',
      'task_tree',
      'tree_budgets',
      'wakeups',
    ]);
  } finally {
    await sql.end();
  }
  const health = await fetch(`${svc.healthUrl}/readyz`);
  expect(health.status).toBe(200);
});
