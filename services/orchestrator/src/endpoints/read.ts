import { OrchRead } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { OrchRuntime } from '../flows/context.js';
import { inbox, messagePage, taskPage, workspaceOf, workspacePage, wsTicketConsume } from '../flows/read.js';

/** The operator's read surface: listings and transcripts. */
export const readEndpoints = (rt: OrchRuntime): Registration[] => [
  on(OrchRead.workspaceList, (req) => workspacePage(rt, req)),
  on(OrchRead.workspaceGet, (req) => workspaceOf(rt, req.actor, req.workspace_id)),
  on(OrchRead.taskList, (req) => taskPage(rt, req)),
  on(OrchRead.sessionMessages, (req) => messagePage(rt, req)),
  on(OrchRead.inbox, (req) => inbox(rt, req)),
  on(OrchRead.ticketConsume, (req) => wsTicketConsume(rt, req)),
];
