import { transaction } from '@kandev/runtime';
import { BUDGET_HOLD, canAccessWorkspace, notFound, skipReasonOf, type Actor, type Hold, type Holds, type RequestOf } from '@kandev/contracts';
import { cancelWakeupsOf, countActiveWakeups, getWakeup, insertWakeup, toWakeup } from '../store/wakeups.js';
import { gateHold, ungateHold } from '../store/gates.js';
import { budgetHoldReleased } from './budget.js';
import type { CallContext, HoldsRuntime } from './context.js';
import { knownTask } from './tree.js';

/** POST /wakeups: queued for the dispatcher; the same idempotency key on the same task is the same wakeup. */
export async function createWakeup(rt: HoldsRuntime, call: CallContext, req: RequestOf<typeof Holds.wakeupCreate>, kick: () => void) {
  const task = await knownTask(rt, call, req.actor, req.task_id);
  const { wakeup, created } = await insertWakeup(rt.sql, {
    task_id: task.id,
    workspace_id: task.workspace_id,
    reason: req.reason,
    payload: req.payload,
    idempotency_key: req.idempotency_key ?? null,
    run_at: req.run_at ?? null,
  });
  if (created) kick();
  return toWakeup(wakeup);
}

export async function readWakeup(rt: HoldsRuntime, actor: Actor, wakeupId: string) {
  const w = await getWakeup(rt.sql, wakeupId);
  if (!w || !w.workspace_id || !canAccessWorkspace(actor, w.workspace_id)) throw notFound('wakeup not found');
  return toWakeup(w);
}

export async function activeWakeups(rt: HoldsRuntime, taskIds: readonly string[]) {
  return { count: taskIds.length ? await countActiveWakeups(rt.sql, taskIds) : 0 };
}

/**
 * A hold the orchestrator committed: gate its members and cancel their queued and
 * claimed wakeups with the hold's reason, in one transaction. Idempotent; reached
 * both by the orchestrator's call and by the tree_hold.created event, either of which may land
 * after the pause answered and a wakeup was posted: only wakeups requested up to the hold's
 * creation are cancelled, later ones are gated (finished), as says. The hold's `created_at`
 * is the orchestrator database's clock and `requested_at` this one's: on one PostgreSQL server (the
 * usual layout) they agree; skewed clocks only move a wakeup of the skew's width from one of those
 * two outcomes to the other, and neither launches anything.
 */
export async function applyHold(rt: HoldsRuntime, hold: Hold): Promise<{ cancelled_wakeups: number }> {
  return transaction(rt.sql, async (tx) => {
    if (!(await gateHold(tx, hold))) return { cancelled_wakeups: 0 };
    return {
      cancelled_wakeups: await cancelWakeupsOf(
        tx,
        hold.members.map((m) => m.task_id),
        skipReasonOf(hold.mode),
        hold.created_at,
      ),
    };
  }) as Promise<{ cancelled_wakeups: number }>;
}

/** A released hold: its members are no longer gated; nothing is replayed. Idempotent. */
export async function releaseHold(rt: HoldsRuntime, hold: Hold): Promise<{ released: boolean }> {
  const released = await transaction(rt.sql, async (tx) => ({ released: await ungateHold(tx, hold) }));
  if (hold.created_by === BUDGET_HOLD.created_by) await budgetHoldReleased(rt, hold.id); // B-8: no longer the budget's hold
  return released;
}
