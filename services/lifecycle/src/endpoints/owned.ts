import { Life } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { ExecutionSupervisor } from '../supervisor.js';

/**
 * Instance-routed: `kandev.life.<instance>.exec.*` reaches the owner of an execution and no one
 * else (the subject carries the instance id, so no queue group is needed).
 */
export const ownedExecutionEndpoints = (supervisor: ExecutionSupervisor, instanceId: string): Registration[] => [
  on(Life.prompt.at(instanceId), (req) => supervisor.prompt(req), ''),
  on(Life.cancel.at(instanceId), (req) => supervisor.cancel(req), ''),
  on(Life.stop.at(instanceId), (req) => supervisor.stop(req), ''),
];
