import { OrchClarification, OrchMcpClarification } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import {
  askQuestions,
  cancelClarification,
  clarificationsOfTask,
  expireBundle,
  getClarification,
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
  on(OrchMcpClarification.ask, (req, ctx) => askQuestions(rt, ctx, req)),
  on(OrchMcpClarification.renew, (req) => renewWaiter(rt, req)),
  on(OrchMcpClarification.expire, (req) => expireBundle(rt, req)),
];
