import { OrchClarification, OrchMcpClarification } from '@kandev/contracts';
import { verifyMcpCaller } from '../flows/caller.js';
import { on, type Registration } from '@kandev/runtime';
import {
  askQuestions,
  cancelClarification,
  clarificationsOfTask,
  expireBundle,
  getClarification,
  releaseWaiter,
  renewWaiter,
  respondToClarification,
} from '../flows/clarifications.js';
import type { OrchRuntime } from '../flows/context.js';

/** the operator's side (through the gateway) and the waiting tool call's side (mcp only, kandev.orch.mcp.>). */
export const clarificationEndpoints = (rt: OrchRuntime): Registration[] => [
  on(OrchClarification.get, (req) => getClarification(rt, req)),
  on(OrchClarification.respond, (req, ctx) => respondToClarification(rt, ctx, req)),
  on(OrchClarification.cancel, (req, ctx) => cancelClarification(rt, ctx, req)),
  on(OrchClarification.ofTask, (req) => clarificationsOfTask(rt, req)),
  // The MCP side: the calling agent's forwarded token is verified first, as on every orch.mcp subject.
  on(OrchMcpClarification.ask, async (req, ctx) => {
    await verifyMcpCaller(rt, req, ['task']);
    return askQuestions(rt, ctx, req);
  }),
  on(OrchMcpClarification.renew, async (req) => {
    await verifyMcpCaller(rt, req, ['task']);
    return renewWaiter(rt, req);
  }),
  on(OrchMcpClarification.expire, async (req) => {
    await verifyMcpCaller(rt, req, ['task']);
    return expireBundle(rt, req);
  }),
  on(OrchMcpClarification.release, async (req) => {
    await verifyMcpCaller(rt, req, ['task']);
    return releaseWaiter(rt, req);
  }),
];
