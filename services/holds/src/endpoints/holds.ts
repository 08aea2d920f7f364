import { Budget, Holds } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { HoldsRuntime } from '../flows/context.js';
import { budgetOfRoot, readBudget, removeBudget, setBudget } from '../flows/budget.js';
import { costSummary, recordCostEvent } from '../flows/costs.js';
import { activeWakeups, applyHold, createWakeup, readWakeup, releaseHold } from '../flows/wakeups.js';

/** Wakeups, cost events and the gates the orchestrator's holds put on them. Thin: the runtime validates. */
export const holdsEndpoints = (rt: HoldsRuntime, kick: () => void): Registration[] => [
  on(Holds.wakeupCreate, (req, ctx) => createWakeup(rt, ctx, req, kick)),
  on(Holds.wakeupGet, (req) => readWakeup(rt, req.actor, req.wakeup_id)),
  on(Holds.wakeupCount, (req) => activeWakeups(rt, req.task_ids)),
  on(Holds.costRecord, ({ actor, ...event }, ctx) => recordCostEvent(rt, ctx, actor, event)),
  on(Budget.set, (req, ctx) => setBudget(rt, ctx, req)),
  on(Budget.get, (req, ctx) => readBudget(rt, ctx, req.actor, req.task_id)),
  on(Budget.remove, (req, ctx) => removeBudget(rt, ctx, req.actor, req.task_id)),
  on(Budget.ofRoot, (req) => budgetOfRoot(rt, req.task_id)),
  on(Holds.costSummary, (req, ctx) => costSummary(rt, ctx, req.actor, req.task_id)),
  on(Holds.holdApplied, (req) => applyHold(rt, req.hold)),
  on(Holds.holdReleased, (req) => releaseHold(rt, req.hold)),
];
