import { canAccessWorkspace, notFound, OrchTree, type Actor } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { treeNode, upsertLineage, type TreeNode } from '../store/costs.js';
import type { CallContext, HoldsRuntime } from './context.js';

/**
 * The task as this service may act on it: from the tree projection when it is there, else asked
 * of the orchestrator (which owns the tree and checks the actor's access), whose answer — the task
 * and its ancestors — joins the projection. Another workspace's task is NOT_FOUND (no leak).
 */
export async function knownTask(rt: HoldsRuntime, call: CallContext, actor: Actor, taskId: string): Promise<TreeNode> {
  const known = await treeNode(rt.sql, taskId);
  if (known) {
    if (!canAccessWorkspace(actor, known.workspace_id)) throw notFound('task not found');
    return known;
  }
  const chain = await request(rt.nc, OrchTree.lineage, { actor, task_id: taskId }, { requestId: call.requestId }).catch((e) => {
    if ((e as { code?: string }).code === 'FORBIDDEN') throw notFound('task not found');
    throw e;
  });
  await upsertLineage(rt.sql, chain);
  return chain.at(-1)!;
}
