import { OrchPermission } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { OrchRuntime } from '../flows/context.js';
import { permissionsOfTaskFor, respondToPermission } from '../flows/permissions.js';

/** R-8.3: the operator's side of agents' permission requests (through the gateway). */
export const permissionEndpoints = (rt: OrchRuntime): Registration[] => [
  on(OrchPermission.ofTask, (req) => permissionsOfTaskFor(rt, req)),
  on(OrchPermission.respond, (req, ctx) => respondToPermission(rt, ctx, req)),
];
