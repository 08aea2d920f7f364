import { Life, LifePermission } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { ExecutionSupervisor } from '../supervisor.js';

/**
 * Instance-routed: `kandev.life.<instance>.exec.*` reaches the owner of an execution and no one
 * else. Only this instance subscribes to its subjects, so the service's queue group they keep (the
 * default) never has a second member to balance to.
 */
export const ownedExecutionEndpoints = (supervisor: ExecutionSupervisor, instanceId: string): Registration[] => [
  on(Life.prompt.at(instanceId), (req) => supervisor.prompt(req)),
  on(Life.cancel.at(instanceId), (req) => supervisor.cancel(req)),
  on(Life.stop.at(instanceId), (req, ctx) => supervisor.stop(req, ctx)),
  on(Life.stopMany.at(instanceId), (req, ctx) => supervisor.stopMany(req, ctx)),
  on(LifePermission.respond.at(instanceId), (req) => supervisor.respondPermission(req)),
  // The drain answers when it is done (up to wait_ms + a teardown); its caller's timeout says how long it waits.
  on(Life.drain.at(instanceId), (req) => supervisor.drain(req)),
];
