import {
  actorLabel,
  Budget,
  DEFAULT_BUDGET_WARN_PERCENT,
  notFound,
  OrchBudget,
  validationError,
  type Actor,
  type BudgetCrossing,
  type EventDataOf,
  type EventEnvelope,
  type EventType,
  type RequestOf,
  type TreeBudget,
} from '@kandev/contracts';
import { buildEvent, repeatEvery, request, transaction, type EventScope, type Tx } from '@kandev/runtime';
import { crossingKey, evaluateBudget, recordCrossings } from '../domain/budget.js';
import {
  addToBudgetSpend,
  clearBudgetHold,
  deleteBudget,
  getBudget,
  lockTreeSpendExclusive,
  lockTreeSpendShared,
  settleCrossing,
  stalePendingCrossings,
  toBudget,
  upsertBudget,
  writeState,
  type BudgetRow,
} from '../store/budgets.js';
import { treeCost } from '../store/costs.js';
import { afterReply, type CallContext, type HoldsRuntime } from './context.js';
import { knownTask } from './tree.js';

/** B-8 tree budgets: set, read, removed by the operator; checked by every cost event of a budgeted tree. */

const BUDGET_ACTOR = { type: 'system' as const, id: 'budget' };

export type Emit = <T extends EventType>(type: T, scope: EventScope, data: EventDataOf<T>) => void;

/** A transaction whose events go through the outbox: staged inside it, published once it committed. */
export async function transactEvents<T>(rt: HoldsRuntime, fn: (tx: Tx, emit: Emit) => Promise<T>): Promise<T> {
  let staged: EventEnvelope[] = [];
  const out = (await transaction(rt.sql, async (tx) => {
    staged = [];
    const emit: Emit = (type, scope, data) => void staged.push(buildEvent(type, scope, data) as EventEnvelope);
    const result = await fn(tx, emit);
    await rt.outbox.addMany(tx, staged);
    return result;
  })) as T;
  await rt.outbox.flush(staged);
  return out;
}

/** A crossing decided in a committed transaction, for the orchestrator to act on once. */
export interface Crossing {
  rootId: string;
  workspaceId: string;
  seq: number;
  crossing: BudgetCrossing;
  /** A warning to report first, under its own key (a jump past the cap, or a warning not yet reported). */
  warningSeq: number | null;
  budget: TreeBudget;
}

const crossingOfRow = (row: BudgetRow): Crossing => ({
  rootId: row.task_id,
  workspaceId: row.workspace_id,
  seq: row.crossing_seq,
  crossing: row.pending!,
  warningSeq: row.pending === 'exceeded' ? row.warning_seq : null,
  budget: toBudget(row),
});

const scopeOf = (row: BudgetRow): EventScope => ({ workspace_id: row.workspace_id, task_id: row.task_id, actor: BUDGET_ACTOR });

/**
 * The budget re-evaluated at its spend, under its row lock (the caller holds it): its new state,
 * and the crossings that makes, once. A warning is announced in the same transaction
 * (`tree_budget.warned`), so before anything the cap does; the cap's announcement waits for the
 * pause (`settle`), to carry its hold.
 */
async function applySpend(tx: Tx, emit: Emit, row: BudgetRow): Promise<{ budget: TreeBudget; crossing: Crossing | null }> {
  const change = evaluateBudget(row.state, Number(row.spent_cents), Number(row.limit_cents), row.warn_percent);
  if (change.state === row.state && !change.crossings.length) return { budget: toBudget(row), crossing: null };
  const next = await writeState(tx, row.task_id, change.state, change.crossings.length ? recordCrossings(row, change.crossings) : null);
  const budget = toBudget(next);
  if (change.crossings.includes('warned')) emit('tree_budget.warned', scopeOf(next), budget);
  return { budget, crossing: change.crossings.length ? crossingOfRow(next) : null };
}

/**
 * The check every cost event makes, inside its own transaction after its rollup: the event's cost
 * added to its tree's budget (the running total, ADR 0078), and the state re-evaluated under the
 * row lock that addition takes. A tree with no budget costs a shared lock and a probe that finds none.
 */
export async function checkBudget(tx: Tx, emit: Emit, taskId: string, cents: number): Promise<Crossing | null> {
  const rootId = await lockTreeSpendShared(tx, taskId);
  if (!rootId) return null;
  const row = await addToBudgetSpend(tx, rootId, cents);
  if (!row) return null;
  return (await applySpend(tx, emit, row)).crossing;
}

/**
 * Have the orchestrator act on a crossing (audit; for the cap, the tree pause), keyed so a retry
 * acts once, then settle it: no longer pending, the hold recorded, `tree_budget.exceeded` sent.
 * Returns the budget as settled, or null when a newer crossing or another replica got there first.
 */
export async function actOnCrossing(rt: HoldsRuntime, requestId: string, c: Crossing): Promise<TreeBudget | null> {
  // The warning the cap went past is audited first, under its own key: warned, then exceeded, once each.
  if (c.warningSeq !== null)
    await request(
      rt.nc,
      OrchBudget.crossed,
      { task_id: c.rootId, crossing: 'warned', key: crossingKey(c.rootId, c.warningSeq), budget: c.budget },
      { requestId },
    );
  const { hold_id } = await request(
    rt.nc,
    OrchBudget.crossed,
    { task_id: c.rootId, crossing: c.crossing, key: crossingKey(c.rootId, c.seq), budget: c.budget },
    { requestId },
  );
  return transactEvents(rt, async (tx, emit) => {
    const settled = await settleCrossing(tx, c.rootId, c.seq, hold_id);
    if (!settled) return null;
    const budget = toBudget(settled);
    if (c.crossing === 'exceeded') emit('tree_budget.exceeded', scopeOf(settled), budget);
    return budget;
  });
}

/** Act on a crossing once the reply is out; a failure is left to the sweeper (`startBudgetSweeper`). */
export function actAfterReply(rt: HoldsRuntime, call: CallContext, c: Crossing): void {
  afterReply(call, () =>
    actOnCrossing(rt, call.requestId, c).catch((e: unknown) =>
      rt.log.warn({ err: e, task_id: c.rootId, crossing: c.crossing }, 'acting on a budget crossing failed; the sweeper retries it'),
    ),
  );
}

/** PUT /tasks/:id/tree/budget: root tasks only; the state is re-evaluated at the tree's cost now (a raised cap can lift it). */
export async function setBudget(rt: HoldsRuntime, call: CallContext, req: RequestOf<typeof Budget.set>): Promise<TreeBudget> {
  const task = await knownTask(rt, call, req.actor, req.task_id);
  if (task.parent_id !== null) throw validationError('a budget caps a whole tree: set it on the root task', { task_id: task.id });
  const { budget, crossing } = await transactEvents(rt, async (tx, emit) => {
    // Counted once every cost event of the tree in flight has committed, before any later one looks
    // for the budget: the running total starts exact (ADR 0078), and a PUT re-syncs it.
    await lockTreeSpendExclusive(tx, task.id);
    const row = await upsertBudget(tx, {
      task_id: task.id,
      workspace_id: task.workspace_id,
      limit_cents: req.limit_cents,
      warn_percent: req.warn_percent ?? DEFAULT_BUDGET_WARN_PERCENT,
      created_by: actorLabel(req.actor),
      spent_cents: (await treeCost(tx, task.id)).cost_cents,
    });
    return applySpend(tx, emit, row);
  });
  if (!crossing) return budget;
  // A cap set below what the tree has cost pauses it now: the answer carries the hold.
  const settled = await actOnCrossing(rt, call.requestId, crossing).catch((e: unknown) => {
    rt.log.warn({ err: e, task_id: task.id, crossing: crossing.crossing }, 'acting on a budget crossing failed; the sweeper retries it');
    return null;
  });
  return settled ?? budget;
}

export async function readBudget(rt: HoldsRuntime, call: CallContext, actor: Actor, taskId: string): Promise<TreeBudget> {
  const task = await knownTask(rt, call, actor, taskId);
  const row = await getBudget(rt.sql, task.id);
  if (!row) throw notFound('this task has no budget');
  return toBudget(row);
}

/** DELETE: idempotent. A budget hold still active stays; resuming it is no longer refused. */
export async function removeBudget(rt: HoldsRuntime, call: CallContext, actor: Actor, taskId: string) {
  const task = await knownTask(rt, call, actor, taskId);
  return { deleted: await deleteBudget(rt.sql, task.id) };
}

/** The orchestrator's resume check: the budget of the tree rooted here, if any. */
export async function budgetOfRoot(rt: HoldsRuntime, taskId: string): Promise<{ budget: TreeBudget | null }> {
  const row = await getBudget(rt.sql, taskId);
  return { budget: row ? toBudget(row) : null };
}

/** The cost summary's `budget`: the task's own, when it is a budgeted root. */
export async function budgetForSummary(rt: HoldsRuntime, taskId: string): Promise<TreeBudget | null> {
  const row = await getBudget(rt.sql, taskId);
  return row ? toBudget(row) : null;
}

/** A released hold is no longer a budget's. */
export const budgetHoldReleased = (rt: HoldsRuntime, holdId: string) => clearBudgetHold(rt.sql, holdId);

/**
 * Crossings whose instance died (or whose orchestrator call failed) before they were acted on,
 * retried every BUDGET_SWEEP_MS once they are BUDGET_CROSSING_RETRY_MS old. Every replica sweeps;
 * the orchestrator acts on a key once, and settling is conditional, so two sweeps cost a request.
 */
export function startBudgetSweeper(rt: HoldsRuntime): () => void {
  return repeatEvery(
    rt.env.BUDGET_SWEEP_MS,
    async () => {
      for (const row of await stalePendingCrossings(rt.sql, rt.env.BUDGET_CROSSING_RETRY_MS, 20))
        await actOnCrossing(rt, `budget-sweep:${row.task_id}:${row.crossing_seq}`, crossingOfRow(row));
    },
    (e) => rt.log.warn({ err: e }, 'budget sweep failed'),
    'budget.sweep',
  );
}
