import type { Actor } from '@kandev/contracts';
import type { Logger, Tx } from '@kandev/runtime';
import type { TaskRow } from '../store/rows.js';
import { changeTaskStatus } from './changes.js';
import type { Emit } from './context.js';

/**
 * The REVIEW step of a stop (R-1.4), on a task this transaction holds locked and the caller has
 * found may move (`mayMoveToReview`): the write is `changeTaskStatus`'s, the one writer of a task's
 * status, and its event carries the row that write returned. It runs in a savepoint, so a failure
 * undoes it alone: the accepted stops stand, no event is staged for it, and the failure is logged
 * with its cause. True when the task is in REVIEW now.
 */
export async function reviewAfterStop(tx: Tx, emit: Emit, task: TaskRow, actor: Actor, log: Logger): Promise<boolean> {
  try {
    await tx.savepoint((sp) => changeTaskStatus(sp, emit, task, 'REVIEW', { actor, reason: 'stopped' }));
    return true;
  } catch (err) {
    log.error({ err, task_id: task.id, status: task.status }, 'REVIEW transition after stop failed; the stops stand');
    return false;
  }
}
