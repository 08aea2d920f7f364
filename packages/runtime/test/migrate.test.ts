import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@kandev/testkit';
import { connectDb } from '../src/index.js';

const run = promisify(execFile);
const script = fileURLToPath(new URL('./fixtures/migrate-once.mjs', import.meta.url));
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(async () => db?.drop());

it('applies each migration exactly once when two processes race', async () => {
  const results = await Promise.all([
    run(process.execPath, [script, db.url]),
    run(process.execPath, [script, db.url]),
    run(process.execPath, [script, db.url]),
  ]);
  const applied = results.map((r) => JSON.parse(r.stdout) as string[]);
  // Exactly one process applied the migration, the others found it done.
  expect(applied.filter((a) => a.includes('001_counter.sql'))).toHaveLength(1);
  const sql = connectDb(db.url, 'racetest');
  try {
    expect(await sql`SELECT count(*)::int AS n FROM applied`).toEqual([{ n: 1 }]);
    expect((await sql`SELECT name FROM schema_migrations ORDER BY name`).map((r) => r.name)).toEqual([
      '000_runtime_outbox_inbox.sql',
      '000_runtime_outbox_inbox_purge.sql',
      '001_counter.sql',
    ]);
  } finally {
    await sql.end();
  }
});
