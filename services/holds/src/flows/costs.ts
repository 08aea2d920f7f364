import type { Actor, Holds, RequestOf } from '@kandev/contracts';
import { conflict } from '@kandev/contracts';
import { product } from '@kandev/runtime';
import { recordCost, treeCost, type CostRow } from '../store/costs.js';
import { actAfterReply, budgetForSummary, checkBudget, transactEvents, type Crossing } from './budget.js';
import type { CallContext, HoldsRuntime } from './context.js';
import { knownTask } from './tree.js';

const toCostEvent = (r: CostRow, duplicate: boolean) => ({
  id: r.id,
  task_id: r.task_id,
  session_id: r.session_id,
  usage_event_id: r.usage_event_id,
  model: r.model,
  cost_cents: Number(r.cost_cents),
  tokens_in: Number(r.tokens_in),
  tokens_cached_in: Number(r.tokens_cached_in),
  tokens_out: Number(r.tokens_out),
  occurred_at: r.occurred_at,
  priced: r.priced,
  duplicate,
});

type CostInput = Omit<RequestOf<typeof Holds.costRecord>, 'actor'>;

/** POST /cost-events and lifecycle's usage events: idempotent by usage_event_id, folded into the task's rollup. */
export async function recordCostEvent(rt: HoldsRuntime, call: CallContext, actor: Actor, e: CostInput) {
  const task = await knownTask(rt, call, actor, e.task_id);
  const found: { crossing: Crossing | null } = { crossing: null };
  const { row, duplicate } = await transactEvents(rt, async (tx, emit) => {
    found.crossing = null;
    const recorded = await recordCost(tx, {
      task_id: task.id,
      session_id: e.session_id ?? null,
      usage_event_id: e.usage_event_id,
      model: e.model ?? null,
      cost_cents: e.cost_cents,
      tokens_in: e.tokens_in,
      tokens_cached_in: e.tokens_cached_in,
      tokens_out: e.tokens_out,
      occurred_at: e.occurred_at ?? null,
      priced: e.priced ?? true,
    });
    // B-8: the tree's budget, checked under its row lock with this event counted; a duplicate changes nothing.
    if (!recorded.duplicate) found.crossing = await checkBudget(tx, emit, task.id, e.cost_cents);
    return recorded;
  });
  // Committed and new (a replayed usage event counts once): the spend the spending alerts read.
  if (!duplicate)
    product.costRecorded({
      model: row.model,
      tokens_in: Number(row.tokens_in),
      tokens_cached_in: Number(row.tokens_cached_in),
      tokens_out: Number(row.tokens_out),
      cost_cents: Number(row.cost_cents),
    });
  if (found.crossing) actAfterReply(rt, call, found.crossing);
  // A usage id is global; one already used by another task is the caller's mistake, not a duplicate.
  if (duplicate && row.task_id !== task.id) throw conflict('usage_event_id is already recorded for another task');
  return toCostEvent(row, duplicate);
}

/** the subtree's cost. A task absent from the projection has no cost events under it (recording adds the whole path). */
export async function costSummary(rt: HoldsRuntime, call: CallContext, actor: Actor, taskId: string) {
  const root = await knownTask(rt, call, actor, taskId);
  const cost = await treeCost(rt.sql, root.id);
  // B-8: a budgeted root's summary carries its budget (an added field, absent for every other task).
  const budget = await budgetForSummary(rt, root.id);
  return { task_id: root.id, include_descendants: true as const, ...cost, ...(budget ? { budget } : {}) };
}
