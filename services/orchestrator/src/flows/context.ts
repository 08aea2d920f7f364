import type { EventDataOf, EventEnvelope, EventType } from '@kandev/contracts';
import { buildEvent, trace, transaction, type EventScope, type RegistryReader, type ServiceRuntime, type Tx } from '@kandev/runtime';
import type { OrchestratorEnv } from '../env.js';
import type { TeardownYield } from './teardown-yield.js';

export type OrchRuntime = ServiceRuntime<OrchestratorEnv> & {
  /** The execution registry, read from its bucket directly (ADR 0011); the lifecycle instances write it. */
  readonly registry: RegistryReader;
  /** Stop decisions in flight on this instance; answer-at-commit teardowns wait for them (ADR 0012). */
  readonly teardownYield: TeardownYield;
};

export type Emit = <T extends EventType>(type: T, scope: EventScope, data: EventDataOf<T>) => Promise<void>;

/**
 * A timestamp on the request's span (an event, much cheaper than a child span) at a step of a hot
 * path, so its time can be split per step from the exported traces (bench/src/scenarios/10-cancel-to-agent.ts,
 * 12-stop-task-mcp.ts). Events, unlike span starts, are timed from the monotonic clock.
 */
export const mark = (step: string) => void trace.getActiveSpan()?.addEvent(step);

/** A committed transaction whose events are staged, not yet published: `publish` (which never rejects) sends them. */
export interface Committed<T> {
  result: T;
  /** Sends the staged events, with any `extra` a statement of the caller staged in the outbox itself; failures are left to the outbox relay. */
  publish: (extra?: readonly EventEnvelope[]) => Promise<void>;
}

/**
 * The one transaction of this service: a plain transaction on one connection (`transaction`,
 * bounded by the request's deadline, ADR 0034) whose events go through the outbox, staged inside
 * it and written in one statement just before COMMIT. Every statement is sent in the order `fn`
 * awaits it: BEGIN (awaited), `fn`'s statements, the outbox rows, COMMIT. Nothing depends on how
 * postgres.js queues statements: a statement whose order matters is awaited before the next is
 * issued (ADR 0033). A failed statement fails the transaction, and nothing is published for it.
 *
 * The events are published right after the commit, before this resolves; with
 * `{ publish: 'later' }` the caller gets them as `publish` and chooses when (a stop and a cancel
 * publish them once their reply is sent, `afterReply`).
 */
export function transact<T>(rt: OrchRuntime, fn: (tx: Tx, emit: Emit) => Promise<T>): Promise<T>;
export function transact<T>(rt: OrchRuntime, fn: (tx: Tx, emit: Emit) => Promise<T>, opts: { publish: 'later' }): Promise<Committed<T>>;
export async function transact<T>(rt: OrchRuntime, fn: (tx: Tx, emit: Emit) => Promise<T>, opts?: { publish: 'later' }): Promise<T | Committed<T>> {
  let staged: EventEnvelope[] = [];
  const result = (await transaction(rt.sql, async (tx) => {
    staged = [];
    // Step marks for the bench's per-step split (bench/src/scenarios/10, 12): BEGIN done, fn done, committed.
    mark('transaction.reserved');
    // Built (and validated) when emitted, written in one statement just before commit.
    const emit: Emit = async (type, scope, data) => void staged.push(buildEvent(type, scope, data) as EventEnvelope);
    const out = await fn(tx, emit);
    mark('transaction.commit_sent');
    await rt.outbox.addMany(tx, staged);
    return out;
  })) as T;
  mark('transaction.committed');
  const events = staged;
  const publish = (extra: readonly EventEnvelope[] = []) =>
    rt.outbox.flush([...events, ...extra]).catch((e: unknown) => rt.log.warn({ err: e }, 'publishing events failed; the relay will retry'));
  if (opts?.publish === 'later') return { result, publish };
  await publish();
  return result;
}

export interface CallContext {
  requestId: string;
  /** The handler's `afterReply` (packages/runtime rpc.ts): run once the reply is sent. Absent outside a handler. */
  afterReply?: (fn: () => unknown) => void;
}

/** Run `fn` once the current request's reply is out (HandlerContext.afterReply), or now when there is no request to reply to. */
export function afterReply(call: CallContext, fn: () => unknown): void {
  if (call.afterReply) call.afterReply(fn);
  else void fn(); // fn handles its own failures (the stop's and cancel's do)
}
