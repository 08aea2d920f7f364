import { eventSubject, type EventDataOf, type EventEnvelope, type EventType } from '@kandev/contracts';
import { buildEvent, trace, traceHeaders, type EventScope, type RegistryReader, type ServiceRuntime, type Tx } from '@kandev/runtime';
import type { OrchestratorEnv } from '../env.js';
import type { OutboxRow } from '../store/rows.js';
import type { TeardownYield } from './teardown-yield.js';

export type OrchRuntime = ServiceRuntime<OrchestratorEnv> & {
  /** The execution registry, read from its bucket directly (ADR 0011); the lifecycle instances write it. */
  readonly registry: RegistryReader;
  /** Stop decisions in flight on this instance; answer-at-commit teardowns wait for them (ADR 0012). */
  readonly teardownYield: TeardownYield;
};

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
 * A timestamp on the request's span (an event, much cheaper than a child span) at a step of a hot
 * path, so its time can be split per step from the exported traces (bench/src/scenarios/10-cancel-to-agent.ts,
 * 12-stop-task-mcp.ts). Events, unlike span starts, are timed from the monotonic clock.
 */
export const mark = (step: string) => void trace.getActiveSpan()?.addEvent(step);

/** An event as a row of the outbox table, for a statement of this service that stages it itself (Outbox.addMany writes the same). */
export const outboxRow = (ev: EventEnvelope): OutboxRow => ({ id: ev.id, subject: eventSubject(ev.type), payload: ev, trace: traceHeaders() });

/** What `transactInFlights` offers the function it runs. */
export interface Flight {
  /**
   * The transaction's now(), what now() writes in every statement of it: read by a statement sent
   * with whatever `fn` sends at the time of the call (call it before the first await, and it rides
   * with BEGIN).
   */
  now(): Promise<string>;
  /**
   * End the transaction with these writes, issued and not awaited: the outbox rows and COMMIT go
   * out right behind them, one round trip for all. Their events must already be emitted (built
   * from the rows the writes will return, see store/sessions.ts cancelledRow). A failed write
   * turns that COMMIT into a rollback and fails the transaction.
   */
  last(writes: Promise<unknown>): void;
}

/**
 * A transaction whose statements travel in flights, for the hot control paths (a stop): on a
 * reserved connection, BEGIN goes out with the first statements `fn` issues and COMMIT with its
 * last writes and the outbox rows, so each dependent step of `fn` costs one round trip and the
 * commit none of its own. (postgres.js's `sql.begin` awaits BEGIN alone and sends COMMIT alone, two
 * round trips more; and it fails the whole transaction for any statement that failed, even one
 * rolled back to a savepoint.)
 *
 * Statements go out in the order postgres.js is handed them (a microtask after each is first
 * awaited, so statements awaited inside helpers can overtake plain ones listed beside them: order
 * that matters is made by awaiting, or by `last`); a failed one aborts the transaction, so the
 * ones after it fail too. A COMMIT sent behind a failed statement only rolls back, and the failure
 * is reported. The caller publishes the events after commit, when it chooses (`publish`, which
 * never rejects: failures are left to the outbox relay), with any `extra` events a statement of
 * its own staged in the outbox.
 */
export async function transactInFlights<T>(
  rt: OrchRuntime,
  fn: (tx: Tx, emit: Emit, flight: Flight) => Promise<T>,
): Promise<{ result: T; publish: (extra?: readonly EventEnvelope[]) => Promise<void> }> {
  const staged: EventEnvelope[] = [];
  const emit: Emit = async (type, scope, data) => void staged.push(buildEvent(type, scope, data) as EventEnvelope);
  const conn = await rt.sql.reserve();
  trace.getActiveSpan()?.addEvent('transaction.reserved');
  // The statements `fn` issues share BEGIN's transaction: one connection runs them in order.
  const tx = conn as unknown as Tx;
  let open = true;
  let last: Promise<unknown> | null = null;
  let now: Promise<string> | null = null;
  const flight: Flight = {
    now: () => (now ??= conn<{ now: string }[]>`SELECT now() AS now`.then(([row]) => row!.now)),
    last(writes) {
      last = writes;
      writes.catch(() => undefined); // awaited with COMMIT below, unless fn throws first
    },
  };
  try {
    const begin = conn`BEGIN`;
    begin.catch(() => undefined); // awaited below; a refusal thrown by fn must not leave it unhandled
    const result = await fn(tx, emit, flight);
    // By the time setImmediate runs, every statement fn issued has been handed to the connection
    // (a query is sent from a microtask of its first await), so the outbox rows and COMMIT queue
    // behind them on the wire.
    if (last) await new Promise((resolve) => setImmediate(resolve));
    trace.getActiveSpan()?.addEvent('transaction.commit_sent');
    await Promise.all([begin, last, rt.outbox.addMany(tx, staged), conn`COMMIT`]);
    trace.getActiveSpan()?.addEvent('transaction.committed');
    open = false;
    const publish = (extra: readonly EventEnvelope[] = []) =>
      rt.outbox.flush([...staged, ...extra]).catch((e: unknown) => rt.log.warn({ err: e }, 'publishing events failed; the relay will retry'));
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
