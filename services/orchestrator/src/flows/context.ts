import type { EventDataOf, EventEnvelope, EventType } from '@kandev/contracts';
import { buildEvent, trace, type EventScope, type ServiceRuntime, type Tx } from '@kandev/runtime';
import type { OrchestratorEnv } from '../env.js';

export type OrchRuntime = ServiceRuntime<OrchestratorEnv>;

export type Emit = <T extends EventType>(type: T, scope: EventScope, data: EventDataOf<T>) => Promise<void>;

/**
 * One transaction whose events go through the outbox: staged inside the transaction, published
 * right after it commits. Nothing is published for a rolled-back transaction.
 */
export async function transact<T>(rt: OrchRuntime, fn: (tx: Tx, emit: Emit) => Promise<T>): Promise<T> {
  let staged: EventEnvelope[] = [];
  const result = (await rt.sql.begin(async (tx) => {
    staged = [];
    // Built (and validated) when emitted, written in one statement just before commit.
    const emit: Emit = async (type, scope, data) => void staged.push(buildEvent(type, scope, data) as EventEnvelope);
    const out = await fn(tx, emit);
    await rt.outbox.addMany(tx, staged);
    return out;
  })) as T;
  await rt.outbox.flush(staged);
  return result;
}

/**
 * A transaction whose statements travel in flights, for the hot control paths (a stop): on a
 * reserved connection, BEGIN goes out with the first statements `fn` issues and COMMIT with the
 * outbox insert, so each dependent step of `fn` costs one round trip and the commit one more.
 * (postgres.js's `sql.begin` awaits BEGIN alone and sends COMMIT alone, two round trips more; and
 * it fails the whole transaction for any statement that failed, even one rolled back to a
 * savepoint, which a step allowed to fail on its own, like a stop's REVIEW transition, needs.)
 *
 * Statements `fn` issues together are pipelined in issue order; a failed one aborts the
 * transaction, so the ones after it fail too. A COMMIT sent behind a failed statement only rolls
 * back, and the failure is reported. The caller publishes the events after commit, when it
 * chooses (`publish`, which never rejects: failures are left to the outbox relay).
 */
export async function transactInFlights<T>(rt: OrchRuntime, fn: (tx: Tx, emit: Emit) => Promise<T>): Promise<{ result: T; publish: () => Promise<void> }> {
  const staged: EventEnvelope[] = [];
  const emit: Emit = async (type, scope, data) => void staged.push(buildEvent(type, scope, data) as EventEnvelope);
  const conn = await rt.sql.reserve();
  trace.getActiveSpan()?.addEvent('transaction.reserved');
  // The statements `fn` issues share BEGIN's transaction: one connection runs them in order.
  const tx = conn as unknown as Tx;
  let open = true;
  try {
    const begin = conn`BEGIN`;
    begin.catch(() => undefined); // awaited below; a refusal thrown by fn must not leave it unhandled
    const result = await fn(tx, emit);
    await Promise.all([begin, rt.outbox.addMany(tx, staged), conn`COMMIT`]);
    trace.getActiveSpan()?.addEvent('transaction.committed');
    open = false;
    const publish = () => rt.outbox.flush(staged).catch((e: unknown) => rt.log.warn({ err: e }, 'publishing events failed; the relay will retry'));
    return { result, publish };
  } catch (e) {
    // Outside a transaction (a COMMIT that rolled back) ROLLBACK is only a warning.
    if (open) await conn`ROLLBACK`.catch(() => undefined);
    throw e;
  } finally {
    conn.release();
  }
}

export interface CallContext {
  requestId: string;
}
