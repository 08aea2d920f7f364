import { OrchMcpCoord } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import { verifyMcpCaller } from '../flows/caller.js';
import { childConversation, listChildren, spawnSession } from '../flows/coordination.js';
import type { OrchRuntime } from '../flows/context.js';

/** read and restart tools of task mode: the caller's token is verified first, as for every kandev.orch.mcp.> request. */
export const coordinationEndpoints = (rt: OrchRuntime): Registration[] => [
  on(OrchMcpCoord.listChildren, async (req) => {
    await verifyMcpCaller(rt, req, ['task']);
    return listChildren(rt, req);
  }),
  on(OrchMcpCoord.childConversation, async (req) => {
    await verifyMcpCaller(rt, req, ['task']);
    return childConversation(rt, req);
  }),
  on(OrchMcpCoord.spawnSession, async (req, ctx) => {
    await verifyMcpCaller(rt, req, ['task']);
    return spawnSession(rt, ctx, req);
  }),
];
