import { OrchTree } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { OrchRuntime } from '../flows/context.js';
import { holdTree, previewTree, releaseTree } from '../flows/tree.js';
import { launchForWakeup, taskLineage } from '../flows/wakeups.js';

/** Task subtree controls and what the holds service asks of the task tree. */
export const treeEndpoints = (rt: OrchRuntime): Registration[] => [
  on(OrchTree.preview, (req, ctx) => previewTree(rt, ctx, req.actor, req.task_id)),
  on(OrchTree.pause, (req, ctx) => holdTree(rt, ctx, req.actor, req.task_id, 'pause', req.reason ?? null)),
  on(OrchTree.cancel, (req, ctx) => holdTree(rt, ctx, req.actor, req.task_id, 'cancel', req.reason ?? null)),
  on(OrchTree.resume, (req, ctx) => releaseTree(rt, ctx, req.actor, req.task_id, 'pause', req.reason ?? null)),
  on(OrchTree.restore, (req, ctx) => releaseTree(rt, ctx, req.actor, req.task_id, 'cancel', req.reason ?? null)),
  on(OrchTree.lineage, (req) => taskLineage(rt, req.actor, req.task_id)),
  on(OrchTree.wakeupLaunch, (req, ctx) => launchForWakeup(rt, ctx, req)),
];
