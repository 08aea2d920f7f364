import { Life, type Execution } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { ExecutionRegistry } from '../store/registry.js';

/**
 * Answered from the KV bucket by any instance in the queue group, owner or not. A get for
 * an execution this instance owns is answered from memory (the record it puts), so the lookup a
 * stop makes does not queue behind KV round trips when the instance is busy (issue 11).
 */
export const registryEndpoints = (registry: ExecutionRegistry, owned: (executionId: string) => Execution | null): Registration[] => [
  on(Life.list, async (req) => registry.listForTask(req.task_id)),
  on(Life.get, async (req) => owned(req.execution_id) ?? registry.get(req.execution_id, req.task_id)),
];
