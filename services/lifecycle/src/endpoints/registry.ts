import { Life } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { ExecutionRegistry } from '../store/registry.js';

/** Answered from the KV bucket by any instance in the queue group, owner or not. */
export const registryEndpoints = (registry: ExecutionRegistry): Registration[] => [
  on(Life.list, async (req) => registry.listForTask(req.task_id)),
  on(Life.get, async (req) => registry.get(req.execution_id, req.task_id)),
];
