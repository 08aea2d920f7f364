import { internalError, isKandevError, Life, type Actor, type Execution } from '@kandev/contracts';
import { request, type RegistryReader } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import { getTask } from '../store/tasks.js';
import { mark, type CallContext, type OrchRuntime } from './context.js';

/**
 * A stop's view of the registry (ADR 0011): the target task's entries, listed from the bucket
 * itself as the stop arrives, so the listing (two round trips to nats-server) runs alongside the
 * transaction's first statements, holds nothing and asks no lifecycle instance (a stalled one cannot
 * hold a stop's locks). An execution a locked session names that the listing did not see (a launch
 * admitted in between, or an entry gone meanwhile) is read then by its exact key. A failed read is
 * an error, never "gone".
 */
export class TaskRegistryView {
  private readonly listing: Promise<Execution[]>;
  constructor(
    private readonly registry: RegistryReader,
    private readonly taskId: string,
  ) {
    this.listing = registry.listForTask(taskId);
    this.listing.then(() => mark('stop.registry_listed')).catch(() => undefined); // awaited by a read below, or never (a refused caller, nothing active)
  }

  /** The executions the locked sessions name (a child stop): no wait for the listing when they name none. */
  async executionsOf(sessions: ReadonlyArray<{ execution_id: string | null }>): Promise<Execution[]> {
    const ids = sessions.flatMap((s) => (s.execution_id ? [s.execution_id] : []));
    if (!ids.length) return [];
    return this.read(async () => {
      const listed = new Map((await this.listing).map((e) => [e.execution_id, e]));
      const found = await Promise.all(ids.map(async (id) => listed.get(id) ?? this.registry.get(id, this.taskId)));
      return found.filter((e): e is Execution => e !== null);
    });
  }

  /** Every execution of the task (a task stop, R-2.1: orphans included), with those the locked sessions name. */
  async everyExecution(sessions: ReadonlyArray<{ execution_id: string | null }>): Promise<Execution[]> {
    return this.read(async () => {
      const listed = await this.listing;
      const seen = new Set(listed.map((e) => e.execution_id));
      const missed = sessions.flatMap((s) => (s.execution_id && !seen.has(s.execution_id) ? [s.execution_id] : []));
      const found = await Promise.all(missed.map((id) => this.registry.get(id, this.taskId)));
      return [...listed, ...found.filter((e): e is Execution => e !== null)];
    });
  }

  private async read(body: () => Promise<Execution[]>): Promise<Execution[]> {
    try {
      const found = await body();
      mark('stop.registry_read');
      return found;
    } catch (e) {
      throw registryFailure(e);
    }
  }
}

/** A registry read that failed: NATS being unreachable stays UNAVAILABLE (503, retry), anything else is an error, never "nothing running". */
const registryFailure = (e: unknown): Error => (isKandevError(e) && e.code === 'UNAVAILABLE' ? e : internalError('execution registry lookup failed', e));

/** The task's executions as a lifecycle instance sees them (its memory merged with the bucket). A lookup failure is an error, never "nothing running". */
async function registryOf(rt: OrchRuntime, call: CallContext, taskId: string): Promise<Execution[]> {
  try {
    return await request(rt.nc, Life.list, { task_id: taskId }, { requestId: call.requestId });
  } catch (e) {
    throw registryFailure(e);
  }
}

export async function taskExecutions(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string) {
  assertCanAccess(actor, await getTask(rt.sql, taskId));
  const registry = await registryOf(rt, call, taskId);
  return registry.map((e) => ({
    execution_id: e.execution_id,
    session_id: e.session_id,
    status: e.status,
    pid: e.pid,
    protocol: e.protocol,
    instance_id: e.instance_id,
  }));
}
