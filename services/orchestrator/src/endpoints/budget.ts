import { OrchBudget } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import { budgetCrossed } from '../flows/budget.js';
import type { OrchRuntime } from '../flows/context.js';

/** B-8: what a tree budget does to its tree (the holds service reports each crossing once per key). */
export const budgetEndpoints = (rt: OrchRuntime): Registration[] => [on(OrchBudget.crossed, (req, ctx) => budgetCrossed(rt, ctx, req))];
