import { canAccessWorkspace, forbidden, notFound, type Actor } from '@kandev/contracts';

interface Scoped {
  id: string;
  workspace_id: string;
}
interface TreeNode extends Scoped {
  parent_id: string | null;
}

/** An operator sees only the workspaces in their token; an agent only its own workspace. */
export function assertCanAccess<T extends Scoped>(actor: Actor, task: T | null, what = 'task'): T {
  if (!task) throw notFound(`${what} not found`);
  if (!canAccessWorkspace(actor, task.workspace_id)) throw forbidden(`no access to the workspace of this ${what}`);
  return task;
}

/**
 * only the target's direct parent in the same workspace may stop or interrupt it.
 * Self, sibling, child→parent, grandparent, unrelated and cross-workspace callers are refused.
 */
export function assertDirectParent(caller: TreeNode, target: TreeNode): void {
  if (caller.workspace_id !== target.workspace_id) throw forbidden('target task is in another workspace');
  if (target.parent_id !== caller.id) throw forbidden('only the direct parent task may control this task');
}

/** Queued messages may come from any task of the same workspace; nothing crosses workspaces. */
export function assertSameWorkspace(caller: Scoped, target: Scoped): void {
  if (caller.workspace_id !== target.workspace_id) throw forbidden('target task is in another workspace');
}
