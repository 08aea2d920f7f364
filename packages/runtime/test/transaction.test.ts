import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Endpoint } from '@kandev/contracts';
import { createTestDatabase, eventually, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import { connectDb, connectNats, createLogger, on, request, serveEndpoints, transaction, type NatsConnection, type Sql } from '../src/index.js';

/**
 * The deadline reaches the database: a transaction inside a request waits for a lock, runs a
 * statement and holds its locks only as long as the caller still waits for the answer.
 */
const lockRow: Endpoint = { name: 'test.lock_row', subject: 'kandev.test.lock_row', request: z.object({}), result: z.object({}) };
const holdRow: Endpoint = { name: 'test.hold_row', subject: 'kandev.test.hold_row', request: z.object({}), result: z.object({}) };
// Long enough for the handler's whole reply reserve (250 ms, ADR 0015).
const CALLER_WAITS_MS = 2_500;
/** How lockRow's transaction ended. */
let lockRowError: unknown;

describe('transaction()', () => {
  let nats: TestNats;
  let db: TestDatabase;
  let nc: NatsConnection;
  let sql: Sql;
  let other: Sql;
  const log = createLogger('test', 'silent');

  beforeAll(async () => {
    [nats, db] = await Promise.all([startNats(), createTestDatabase({ migrated: false })]);
    sql = connectDb(db.url, 'public');
    other = connectDb(db.url, 'public');
    await sql`CREATE TABLE IF NOT EXISTS locked (id int PRIMARY KEY)`;
    await sql`INSERT INTO locked VALUES (1) ON CONFLICT DO NOTHING`;
    nc = await connectNats({ url: nats.url, name: 'transaction-test' });
    await serveEndpoints(nc, { service: 'orchestrator', instanceId: 't1', queue: 'q', log }, [
      on(lockRow, async () => {
        try {
          await transaction(sql, async (tx) => tx`SELECT id FROM locked WHERE id = 1 FOR UPDATE`);
        } catch (err) {
          lockRowError = err;
          throw err;
        }
        return {};
      }),
      // A handler that takes a row lock and then waits on something that never answers (a network call).
      on(holdRow, async () => {
        await transaction(sql, async (tx) => {
          await tx`SELECT id FROM locked WHERE id = 1 FOR UPDATE`;
          await new Promise(() => {});
        });
        return {};
      }),
    ]);
  });
  afterAll(async () => {
    await nc?.close();
    await Promise.all([sql?.end({ timeout: 1 }), other?.end({ timeout: 1 })]);
    await Promise.all([nats?.stop(), db?.drop()]);
  });

  it('stops waiting for a lock when the caller stops waiting, and says UNAVAILABLE', async () => {
    let release!: () => void;
    const held = other.begin(async (tx) => {
      await tx`SELECT id FROM locked WHERE id = 1 FOR UPDATE`;
      await new Promise<void>((r) => (release = r));
    });
    await eventually(async () => release !== undefined);
    try {
      const err = await request(nc, lockRow, {}, { timeoutMs: CALLER_WAITS_MS }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'UNAVAILABLE' });
      // PostgreSQL ended the lock wait with a bound inside the caller's deadline, and
      // the handler said so. Neither which answer reaches the caller first (the handler's or the
      // caller's own timeout: the reply's 250 ms reserve, which a starved test lane has outlasted)
      // nor the wall clock is asserted; deadline-stats.test checks the reserve.
      const handlerErr = await eventually(async () => lockRowError);
      expect(handlerErr).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/did not answer within the request's deadline \(\d+ ms\)/) });
      const bound = Number(/\((\d+) ms\)/.exec((handlerErr as Error).message)![1]);
      expect(bound).toBeGreaterThan(0);
      expect(bound).toBeLessThan(CALLER_WAITS_MS);
      // PostgreSQL's own bound ended the wait (lock_timeout or statement_timeout, both set to the bound:
      // whichever fires first), not a closed connection.
      expect(['55P03', '57014']).toContain((handlerErr as { cause?: { code?: string } }).cause?.code);
    } finally {
      release();
      await held;
    }
  });

  it('a row lock held across a call that never answers is released once the caller has stopped waiting', async () => {
    const err = await request(nc, holdRow, {}, { timeoutMs: CALLER_WAITS_MS }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'UNAVAILABLE' });
    // PostgreSQL ends the idle transaction (idle_in_transaction_session_timeout), so its lock goes.
    await eventually(async () => {
      const [row] = await other.begin(async (tx) => tx`SELECT id FROM locked WHERE id = 1 FOR UPDATE NOWAIT`).catch(() => [null]);
      return row ? true : null;
    }, 10_000);
  });

  it('outside a request it is bounded too, and commits as a plain transaction', async () => {
    const [row] = await transaction(sql, async (tx) => tx<{ lock_timeout: string }[]>`SELECT current_setting('lock_timeout') AS lock_timeout`);
    expect(row!.lock_timeout).toBe('30s');
  });
});
