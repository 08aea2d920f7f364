import { unavailable } from '@kandev/contracts';
import type { Sql, Tx } from './db.js';
import { remainingMs } from './rpc.js';

/**
 * How long a transaction outside any request (an event consumer, a background loop) may wait for
 * a lock, run one statement, or sit idle between statements.
 */
export const BACKGROUND_TRANSACTION_MS = 30_000;
/** A deadline nearer than this is not worth a transaction: the caller would not see its answer. */
const MIN_TRANSACTION_MS = 10;

/** PostgreSQL's codes for a lock wait, a statement or an idle transaction cut short by the timeouts set below. */
const TIMED_OUT = new Set(['55P03', '57014', '25P03']);

/**
 * The one way a service opens a transaction: bounded by the request it serves. Its first statement
 * sets `lock_timeout`, `statement_timeout` and `idle_in_transaction_session_timeout` for this
 * transaction to what remains of the caller's deadline (`remainingMs()`, less the reply's reserve),
 * so a lock wait never outlives the caller, and a row lock held across a network call (a cancel
 * waiting on lifecycle) is released when the caller has stopped waiting, not later. Outside a
 * request the bound is BACKGROUND_TRANSACTION_MS. A timeout becomes UNAVAILABLE (the caller may
 * retry), with the database's error as its cause; the transaction rolled back.
 */
export async function transaction<T>(sql: Sql, fn: (tx: Tx) => Promise<T>, opts: { mode?: string } = {}): Promise<T> {
  const left = remainingMs();
  if (left !== undefined && left < MIN_TRANSACTION_MS) throw unavailable("transaction not started: the caller's deadline has passed");
  const bound = String(Math.floor(left ?? BACKGROUND_TRANSACTION_MS));
  const body = async (tx: Tx) => {
    await tx`SELECT set_config('lock_timeout', ${bound}, true), set_config('statement_timeout', ${bound}, true), set_config('idle_in_transaction_session_timeout', ${bound}, true)`;
    return fn(tx);
  };
  const started = performance.now();
  try {
    return (await (opts.mode ? sql.begin(opts.mode, body) : sql.begin(body))) as T;
  } catch (e) {
    const code = (e as { code?: string }).code ?? '';
    // An idle transaction past its bound is ended by closing its connection, which the driver reports as closed.
    const idledOut = code === 'CONNECTION_CLOSED' && performance.now() - started >= Number(bound);
    if (TIMED_OUT.has(code) || idledOut) throw unavailable(`the database did not answer within the request's deadline (${bound} ms)`, e);
    throw e;
  }
}
