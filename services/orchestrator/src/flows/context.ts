import type { EventDataOf, EventEnvelope, EventType } from '@kandev/contracts';
import { buildEvent, type EventScope, type ServiceRuntime, type Tx } from '@kandev/runtime';
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

export interface CallContext {
  requestId: string;
}
