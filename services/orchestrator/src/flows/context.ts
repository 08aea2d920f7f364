import type { EventDataOf, EventEnvelope, EventType } from '@kandev/contracts';
import type { EventScope, ServiceRuntime, Tx } from '@kandev/runtime';
import type { OrchestratorEnv } from '../env.js';

export type OrchRuntime = ServiceRuntime<OrchestratorEnv>;

export type Emit = <T extends EventType>(type: T, scope: EventScope, data: EventDataOf<T>) => Promise<void>;

/**
 * One transaction whose events go through the outbox: staged inside the transaction, published
 * right after it commits. Nothing is published for a rolled-back transaction.
 */
export async function transact<T>(rt: OrchRuntime, fn: (tx: Tx, emit: Emit) => Promise<T>): Promise<T> {
  const staged: EventEnvelope[] = [];
  const result = (await rt.sql.begin(async (tx) => {
    const emit: Emit = async (type, scope, data) => {
      staged.push((await rt.outbox.add(tx, type, scope, data)) as EventEnvelope);
    };
    return fn(tx, emit);
  })) as T;
  await rt.outbox.flush(staged);
  return result;
}

export interface CallContext {
  requestId: string;
}
