import { Life, type Execution } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { ExecutionRegistry } from '../store/registry.js';

/**
 * Answered from the KV bucket by any instance in the queue group, owner or not. A get for
 * an execution this instance owns is answered from memory (the record it puts), so the lookup a
 * stop makes does not queue behind KV round trips when the instance is busy.
 */
export const registryEndpoints = (
  registry: ExecutionRegistry,
  owned: { get(executionId: string): Execution | null; ofTask(taskId: string): Execution[] },
): Registration[] => [
  // Merged with what this instance owns: right after a stall (SIGCONT) the requests queued meanwhile
  // are answered before the refresh re-puts the lapsed entries, and must not read "nothing there".
  on(Life.list, async (req) => mergeOwned(await registry.listForTask(req.task_id), owned.ofTask(req.task_id))),
  on(Life.get, async (req) => owned.get(req.execution_id) ?? registry.get(req.execution_id, req.task_id)),
];

function mergeOwned(fromKv: Execution[], mine: Execution[]): Execution[] {
  const byId = new Map(fromKv.map((e) => [e.execution_id, e]));
  for (const e of mine) byId.set(e.execution_id, e);
  return [...byId.values()].sort((a, b) => a.started_at.localeCompare(b.started_at));
}
