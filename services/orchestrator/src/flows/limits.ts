import type { Tx } from '@kandev/runtime';
import { assertDepth, assertUnderLimit } from '../domain/limits.js';
import { countChildren, countLiveSessions, countPendingBundles, levelOf, lockChildrenOf, lockLiveSessionsOf } from '../store/coordination.js';
import type { OrchRuntime } from './context.js';

/*
 * enforced in the database: each check counts under a lock held until its transaction
 * commits, so concurrent requests are serialized on the count and never pass the cap together
 * (ADR 0064).
 */

/** Before an agent's child of `parentId` is inserted: the parent's children and the tree's depth. */
export async function assertChildRoom(rt: OrchRuntime, tx: Tx, parentId: string): Promise<void> {
  await lockChildrenOf(tx, parentId);
  const [children, level] = await Promise.all([countChildren(tx, parentId), levelOf(tx, parentId)]);
  assertDepth(level, rt.env.KANDEV_MAX_DEPTH);
  assertUnderLimit('children_per_task', children, rt.env.KANDEV_MAX_CHILDREN, 'too many child tasks');
}

/**
 * After a session row was inserted, last thing before its start commits: the workspace's active
 * sessions, this one included. The lock is held only from here to commit.
 */
export async function assertLiveSessionRoom(rt: OrchRuntime, tx: Tx, workspaceId: string): Promise<void> {
  const max = rt.env.KANDEV_MAX_LIVE_SESSIONS_PER_WORKSPACE;
  if (max === 0) return;
  await lockLiveSessionsOf(tx, workspaceId);
  // Counted with this start's own session: before it, there were n - 1.
  const n = await countLiveSessions(tx, workspaceId);
  assertUnderLimit('live_sessions_per_workspace', n - 1, max, 'too many live sessions in this workspace');
}

/** Before a question bundle is inserted on a session the caller holds locked. */
export async function assertBundleRoom(rt: OrchRuntime, tx: Tx, sessionId: string): Promise<void> {
  const max = rt.env.KANDEV_MAX_PENDING_QUESTIONS_PER_SESSION;
  if (max === 0) return;
  assertUnderLimit('pending_questions_per_session', await countPendingBundles(tx, sessionId), max, 'too many pending question bundles on this session');
}
