import { OrchMcp } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import { createChildTask, whoami } from '../flows/children.js';
import type { OrchRuntime } from '../flows/context.js';
import { messageTask } from '../flows/message.js';
import { stopChildTask } from '../flows/stop.js';
import { toTask } from '../store/rows.js';

/** The task-mode MCP surface. Only the mcp service may publish here (NATS permissions, deploy/nats). */
export const mcpEndpoints = (rt: OrchRuntime): Registration[] => [
  on(OrchMcp.stopTask, (req, ctx) => stopChildTask(rt, ctx, req.caller_task_id, req.task_id)),
  on(OrchMcp.messageTask, (req, ctx) => messageTask(rt, ctx, req)),
  on(OrchMcp.createTask, (req, ctx) => createChildTask(rt, ctx, req)),
  on(OrchMcp.whoami, async (req) => toTask(await whoami(rt, req.caller_task_id))),
];
