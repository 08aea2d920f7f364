import { z } from 'zod';
import { Actor } from './envelope.js';
import { TreeBudget } from './entities.js';
import { endpoint } from './endpoints.js';
import { text } from './text.js';

/**
 * B-8 tree budgets. A budget caps the cost of a root task's tree. It lives with the cost events, in
 * the holds service, so the cost event that reaches the cap decides it under the budget's row lock
 * in the event's own transaction; the pause is the orchestrator's tree pause, asked once per
 * crossing (docs/decisions/0066-tree-budgets-live-with-the-costs.md).
 */

const id = z.uuid();

/** The warn threshold when PUT names none (INTERFACES.md). */
export const DEFAULT_BUDGET_WARN_PERCENT = 80;
/** The crossings a budget acts on: the warning (audit + notification) and the cap (pause + notification). */
export const BudgetCrossing = z.enum(['warned', 'exceeded']);
export type BudgetCrossing = z.infer<typeof BudgetCrossing>;
/** The hold a budget makes: its `created_by` and `reason` (INTERFACES.md). */
export const BUDGET_HOLD = { created_by: 'budget', reason: 'budget_exceeded' } as const;

export const BudgetInput = z.object({
  /** The cap, in cents of the tree's cost summary: the tree is paused when its cost reaches it. */
  limit_cents: z.number().positive().finite().max(1e15),
  /** Percent of the cap at which `tree_budget.warned` is sent (default 80). */
  warn_percent: z.number().int().min(1).max(100).optional(),
});

export const Budget = {
  /** PUT /tasks/:id/tree/budget: root tasks only (else VALIDATION_ERROR). Re-evaluates the state against the tree's cost now. */
  set: endpoint('holds.budget.set', BudgetInput.extend({ actor: Actor, task_id: id }), TreeBudget),
  /** GET /tasks/:id/tree/budget: NOT_FOUND when the task has none. */
  get: endpoint('holds.budget.get', z.object({ actor: Actor, task_id: id }), TreeBudget),
  /** DELETE /tasks/:id/tree/budget (204). A budget hold still active stays: the operator resumes it. */
  remove: endpoint('holds.budget.delete', z.object({ actor: Actor, task_id: id }), z.object({ deleted: z.boolean() })),
  /** The budget of the tree rooted at this task, or null (the orchestrator's resume check; no actor: internal). */
  ofRoot: endpoint('holds.budget.of_root', z.object({ task_id: id }), z.object({ budget: TreeBudget.nullable() })),
} as const;

export const OrchBudget = {
  /**
   * The holds service reports a crossing of a root's budget, once per crossing (`key`; a retry of
   * the same key acts once). `warned`: an audit row on the root. `exceeded`: the tree pause of
   * `tree/pause`, created by "budget" with reason "budget_exceeded"; `hold_id` null when a member
   * is already held by another hold.
   */
  crossed: endpoint(
    'orch.tree.budget_crossed',
    z.object({ task_id: id, crossing: BudgetCrossing, key: text({ min: 1, max: 200 }), budget: TreeBudget }),
    z.object({ hold_id: id.nullable() }),
  ),
} as const;
