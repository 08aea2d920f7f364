import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@kandev/testkit';
import { connectDb, type Sql } from '../src/index.js';

/** A replica's connections carry its instance id, so pg_stat_activity says which replica holds a lock. */
let db: TestDatabase;
let replica: Sql;
let admin: Sql;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  replica = connectDb(db.url, 'public', { max: 1, instanceId: 'orchestrator-7' });
  admin = connectDb(db.url, 'public', { max: 1 });
});
afterAll(async () => {
  await Promise.all([replica?.end(), admin?.end()]);
  await db?.drop();
});

it("a pool's connections are named after the schema and the instance in pg_stat_activity", async () => {
  const [backend] = await replica<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`;
  const rows = await admin<{ application_name: string }[]>`SELECT application_name FROM pg_stat_activity WHERE pid = ${backend!.pid}`;
  expect(rows).toEqual([{ application_name: 'kandev-public:orchestrator-7' }]);
  const [own] = await admin<{ name: string }[]>`SELECT current_setting('application_name') AS name`;
  expect(own?.name).toBe('kandev-public');
});
