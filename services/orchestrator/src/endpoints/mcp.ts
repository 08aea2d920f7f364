import { OrchMcp } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import { verifyMcpCaller } from '../flows/caller.js';
import { createChildTask, whoami } from '../flows/children.js';
import type { OrchRuntime } from '../flows/context.js';
import { messageTask } from '../flows/message.js';
import { stopChildTask } from '../flows/stop.js';
import { toTask } from '../store/rows.js';

/**
 * The MCP surface. Only the mcp service may publish here (NATS permissions, deploy/nats), and
 * each request must also carry the calling agent's token, verified first (flows/caller.ts).
 */
export const mcpEndpoints = (rt: OrchRuntime): Registration[] => [
  on(OrchMcp.stopChildTask, async (req, ctx) => {
    await verifyMcpCaller(rt, req, ['task']);
    return stopChildTask(rt, ctx, req.caller_task_id, req.task_id);
  }),
  on(OrchMcp.messageTask, async (req, ctx) => {
    await verifyMcpCaller(rt, req, ['task']);
    return messageTask(rt, ctx, req);
  }),
  on(OrchMcp.createTask, async (req, ctx) => {
    await verifyMcpCaller(rt, req, ['task']);
    return createChildTask(rt, ctx, req);
  }),
  on(OrchMcp.whoami, async (req) => {
    await verifyMcpCaller(rt, req, ['task', 'config', 'office', 'external']);
    return toTask(await whoami(rt, req.caller_task_id));
  }),
];
