import { BUDGET_HOLD, Budget, conflict, isKandevError, notFound, OrchBudget, type RequestOf, type TreeBudget } from '@kandev/contracts';
import { request, transaction, type Tx } from '@kandev/runtime';
import { recordAudit } from '../store/audit.js';
import { getTask, lineageOf } from '../store/tasks.js';
import type { CallContext, OrchRuntime } from './context.js';
import { holdTree } from './tree.js';

/**
 * B-8 tree budgets, the orchestrator's part (docs/decisions/0066-tree-budgets-live-with-the-costs.md).
 * The budget and the spend live in the holds service; what the budget does to the tree is done
 * here, through the controls that already exist: the audit log and `tree/pause` itself.
 */

/** The actor of what a budget does: audit rows and the hold's stops say `system:budget`. */
export const BUDGET_ACTOR = { type: 'system' as const, id: BUDGET_HOLD.created_by };

/** The hold made for this crossing (its request id is the crossing's key), if one was. */
async function holdOfCrossing(rt: OrchRuntime, rootId: string, key: string): Promise<string | null> {
  const [row] = await rt.sql<{ id: string }[]>`
    SELECT h.id FROM tree_hold_members m JOIN tree_holds h ON h.id = m.hold_id
    WHERE m.task_id = ${rootId} AND h.request_id = ${key} LIMIT 1`;
  return row?.id ?? null;
}

/** One audit row per crossing on the root (B-3): a retried report of the same crossing adds none. */
async function auditCrossing(
  rt: OrchRuntime,
  root: { id: string; workspace_id: string },
  action: string,
  key: string,
  outcome: string,
  details: Record<string, unknown>,
) {
  await transaction(rt.sql, async (tx) => {
    // Reports of one crossing may race (a sweep beside the first report): one at a time per key.
    await tx`SELECT pg_advisory_xact_lock(hashtext(${'kandev-budget-audit:' + key + ':' + action}))`;
    const [seen] = await tx`SELECT 1 FROM audit_log WHERE task_id = ${root.id} AND request_id = ${key} AND action = ${action} LIMIT 1`;
    if (!seen)
      await recordAudit(tx, {
        task_id: root.id,
        workspace_id: root.workspace_id,
        action,
        actor: `system:${BUDGET_ACTOR.id}`,
        reason: action === 'tree.budget_exceeded' ? BUDGET_HOLD.reason : 'budget_warned',
        request_id: key,
        outcome,
        details,
      });
  });
}

const budgetDetails = (b: TreeBudget) => ({ limit_cents: b.limit_cents, warn_percent: b.warn_percent, spent_cents: b.spent_cents });

/**
 * The holds service reports a crossing of a root's budget. `warned`: an audit row on the root.
 * `exceeded`: the tree pause of `tree/pause` (the same function, so the same transaction, stops,
 * fences, wakeup gate and 1 s propagation wait), its hold created by "budget", and an audit row on
 * the root. Acted on once per `key`: the hold carries it as its request id, so a retry (the holds
 * sweeper, or two replicas) finds the hold instead of making another. A tree with a member already
 * held (another hold) is not paused again: `hold_id` null.
 */
export async function budgetCrossed(rt: OrchRuntime, call: CallContext, req: RequestOf<typeof OrchBudget.crossed>): Promise<{ hold_id: string | null }> {
  const root = await getTask(rt.sql, req.task_id);
  if (!root) throw notFound('task not found');
  const log = rt.log.child({ task_id: root.id, request_id: call.requestId, budget_key: req.key });
  if (req.crossing === 'warned') {
    await auditCrossing(rt, root, 'tree.budget_warned', req.key, 'warned', budgetDetails(req.budget));
    log.info({ ...budgetDetails(req.budget) }, 'tree budget warning');
    return { hold_id: null };
  }
  let holdId = await holdOfCrossing(rt, root.id, req.key);
  if (!holdId) {
    try {
      // The crossing's key is the pause's request id: on the hold, its audit rows, its stops.
      holdId = (
        await holdTree(rt, { requestId: req.key }, BUDGET_ACTOR, root.id, 'pause', BUDGET_HOLD.reason, { createdBy: BUDGET_HOLD.created_by, source: 'budget' })
      ).hold.id;
    } catch (e) {
      if (!isKandevError(e) || e.code !== 'CONFLICT') throw e;
      // Another replica's report of this crossing made the hold, or another hold has a member.
      holdId = await holdOfCrossing(rt, root.id, req.key);
      if (!holdId) log.info({ details: e.details }, 'tree over its budget is already held: not paused again');
    }
  }
  await auditCrossing(rt, root, 'tree.budget_exceeded', req.key, holdId ? 'paused' : 'already_held', { ...budgetDetails(req.budget), hold_id: holdId });
  return { hold_id: holdId };
}

/**
 * under B-8: a pause of a tree whose budget is exceeded is not resumed until the cap is raised
 * or removed. Asked of the holds service inside the resume's transaction, after the workspace's hold
 * lock: a crossing that commits after this answer finds the tree released when its pause runs
 * (that pause waits for the same lock), so a resume never lets an over-budget tree run on.
 */
export async function refuseResumeOverBudget(rt: OrchRuntime, call: CallContext, tx: Tx, taskId: string): Promise<void> {
  const treeRoot = (await lineageOf(tx, taskId))[0];
  if (!treeRoot) return;
  const { budget } = await request(rt.nc, Budget.ofRoot, { task_id: treeRoot.id }, { requestId: call.requestId });
  if (budget?.state === 'exceeded') throw conflict("the tree is over its budget: raise or remove the budget's cap first", { budget });
}
