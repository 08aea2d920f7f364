import net from 'node:net';
import { once } from 'node:events';
import postgres from 'postgres';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, eventually, type TestDatabase } from '@kandev/testkit';
import { connectDb, type Sql } from '../src/index.js';

/**
 * PostgreSQL dropping a connection under its holder (a failover, a restart, an idle-session kill):
 * the holder's queries fail with CONNECTION_CLOSED, the process lives on and the pool serves the
 * next query on a fresh connection. postgres.js 3.4.9 and 3.4.10 crashed the process or hung the pool
 * here (upstream porsager/postgres#1154 and #1208; every case fails against them); 4.x passes them
 * unpatched (ADR 0070). Each pool has one connection, so the one that was lost is the one that must
 * come back. Vitest fails the run on any uncaught exception.
 */

// A new connection answers within connect_timeout (10 s in connectDb); the rest is headroom.
const RECOVERY_MS = 20_000;

let db: TestDatabase;
let admin: Sql;
const pools: Sql[] = [];
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  admin = connectDb(db.url, 'public', { max: 1 });
});
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end({ timeout: 1 })));
});
afterAll(async () => {
  await admin?.end();
  await db?.drop();
});

function pool(): Sql {
  const sql = connectDb(db.url, 'public', { max: 1 });
  pools.push(sql);
  return sql;
}

/** Kill a backend from outside, as a restart or an operator would, and wait until it is gone. */
async function killBackend(pid: number) {
  await admin`SELECT pg_terminate_backend(${pid})`;
  await eventually(async () => (await admin`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ${pid}`)[0]!.n === 0, RECOVERY_MS, 20);
}

const backendPid = async (q: Sql | postgres.TransactionSql<Record<string, never>> | postgres.ReservedSql<Record<string, never>>) =>
  (await (q as Sql)`SELECT pg_backend_pid() AS pid`)[0]!.pid as number;

function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer within ${RECOVERY_MS} ms`)), RECOVERY_MS))),
  ]).finally(() => clearTimeout(timer));
}

it('a reserved connection whose backend died rejects its queries, and once released the pool reconnects', async () => {
  const sql = pool();
  const reserved = await sql.reserve();
  await killBackend(await backendPid(reserved as unknown as Sql));
  // Once the close is seen every query rejects; before it, one may still be written and fail with the socket.
  await expect(within(reserved`SELECT 1`, 'first query on the dead connection')).rejects.toMatchObject({
    code: expect.stringMatching(/^(CONNECTION_CLOSED|ECONNRESET|57P01)$/),
  });
  await expect(within(reserved`SELECT 2`, 'second query on the dead connection')).rejects.toMatchObject({ code: 'CONNECTION_CLOSED' });
  reserved.release();
  expect(await within(sql`SELECT 3 AS x`, 'the pool after the release')).toEqual([{ x: 3 }]);
}, 60_000);

it('a transaction whose backend died fails, the rollback it attempts fails too, and the pool reconnects', async () => {
  const sql = pool();
  const outcome = sql.begin(async (tx) => {
    await killBackend(await backendPid(tx));
    await tx`SELECT 1`; // the connection is gone: rejected
    return 'committed';
  });
  await expect(within(outcome, 'the transaction')).rejects.toMatchObject({ code: expect.stringMatching(/^(CONNECTION_CLOSED|ECONNRESET|57P01)$/) });
  expect(await within(sql`SELECT 4 AS x`, 'the pool after the transaction')).toEqual([{ x: 4 }]);
}, 60_000);

it('a holder whose connection the pool already reconnected for a waiting query never writes into it', async () => {
  const sql = pool();
  const reserved = await sql.reserve();
  const pid = await backendPid(reserved as unknown as Sql);
  // Waits for the only connection; when it closes, the pool reconnects it for this query.
  const waiting = sql`SELECT 5 AS x`;
  const waited = within(
    waiting.then((r) => r),
    'the waiting query',
  );
  await killBackend(pid);
  await expect(
    within(
      reserved`SELECT 1`.catch(() => reserved`SELECT 1`),
      'the holder',
    ),
  ).rejects.toMatchObject({ code: 'CONNECTION_CLOSED' });
  expect(await waited).toEqual([{ x: 5 }]);
  reserved.release(); // the connection is the pool's already: release must leave it alone
  expect(await within(Promise.all([sql`SELECT 6 AS x`, sql`SELECT 7 AS x`]), 'the pool after the release')).toEqual([[{ x: 6 }], [{ x: 7 }]]);
}, 60_000);

/** A pool of one connection whose sockets the test holds, to cut them at the moment it chooses (still real PostgreSQL connections). */
function poolOverOwnSockets() {
  const sockets: net.Socket[] = [];
  const url = new URL(db.url);
  // `socket` is postgres.js's "Custom socket" option; a net.Socket is its SocketLike, which types
  // `end` more narrowly than Node does.
  const options: postgres.Options<{}> = {
    max: 1,
    connect_timeout: 10,
    onnotice: () => undefined,
    socket: async () => {
      const s = net.connect(Number(url.port || 5432), url.hostname);
      await once(s, 'connect');
      sockets.push(s);
      return s as unknown as postgres.SocketLike;
    },
  };
  const sql = postgres(db.url, options) as unknown as Sql;
  pools.push(sql);
  return { sql, sockets };
}

it('a connection that closes with a write still buffered serves the next query once reconnected', async () => {
  // The driver buffers a small query and flushes it from a setImmediate. Issued from the check phase,
  // that flush falls in the next loop iteration, while the socket destroyed right after it closes in
  // this one: the close cancels the flush, and the reconnected connection must flush again.
  const { sql, sockets } = poolOverOwnSockets();
  expect(await sql`SELECT 1 AS x`).toEqual([{ x: 1 }]);
  const { lost } = await new Promise<{ lost: Promise<unknown> }>((resolve) =>
    setImmediate(async () => {
      const q = sql`SELECT 2 AS x`.then((r) => r);
      q.catch(() => undefined); // asserted below; it rejects before that
      for (let i = 0; i < 8; i++) await Promise.resolve(); // the driver builds and buffers the query (still in the check phase)
      sockets.at(-1)!.destroy();
      resolve({ lost: q });
    }),
  );
  await expect(within(lost, 'the query on the destroyed socket')).rejects.toMatchObject({ code: 'CONNECTION_CLOSED' });
  expect(await within(sql`SELECT 3 AS x`, 'the reconnected connection')).toEqual([{ x: 3 }]);
  expect(sockets.length).toBe(2);
}, 60_000);

it('a query sent between a socket error and its close is settled too', async () => {
  // A reset socket emits 'error' (which fails the query in flight) and its 'close' only in a later
  // loop phase; a holder that retries at once sends its next query in between, and releases.
  const { sql, sockets } = poolOverOwnSockets();
  const reserved = await sql.reserve();
  expect(await reserved`SELECT 1 AS x`).toEqual([{ x: 1 }]);
  const pid = await backendPid(reserved as unknown as Sql);
  const inFlight = reserved`SELECT pg_sleep(30)`.then((r) => r);
  const retried = inFlight.catch(() => reserved`SELECT 2 AS x`.then((r) => r));
  // In flight: PostgreSQL runs it.
  await eventually(
    async () => (await admin`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ${pid} AND wait_event = 'PgSleep'`)[0]!.n > 0,
    RECOVERY_MS,
    20,
  );
  const socket = sockets.at(-1)!;
  socket.destroy(Object.assign(new Error('connection reset'), { code: 'ECONNRESET' }));
  // The connection's close, with the reset as its cause.
  await expect(within(inFlight, 'the query in flight')).rejects.toMatchObject({ code: 'CONNECTION_CLOSED', cause: { code: 'ECONNRESET' } });
  await expect(within(retried, 'the query sent after the error')).rejects.toMatchObject({ code: 'CONNECTION_CLOSED' });
  reserved.release();
  expect(await within(sql`SELECT 3 AS x`, 'the pool after the release')).toEqual([{ x: 3 }]);
}, 60_000);
