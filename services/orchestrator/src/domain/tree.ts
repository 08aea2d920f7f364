import { conflict, type HoldMember, type HoldMode, type KandevError, type TaskStatus } from '@kandev/contracts';

/** Why a member is recorded but not acted on. */
export const MemberSkipReasons = { alreadyCancelled: 'already_cancelled' } as const;

/**
 * A hold's members with their status snapshot, taken under the row locks at the instant the
 * hold is created. A cancel hold records members already CANCELLED with `already_cancelled`:
 * restore leaves them cancelled.
 */
export function holdMembersOf(tasks: ReadonlyArray<{ id: string; depth: number; status: TaskStatus }>, mode: HoldMode): HoldMember[] {
  return tasks.map((t) => ({
    task_id: t.id,
    depth: t.depth,
    task_status: t.status,
    skip_reason: mode === 'cancel' && t.status === 'CANCELLED' ? MemberSkipReasons.alreadyCancelled : null,
  }));
}

/** Resume or restore without the matching active hold rooted at the task. */
export function releaseConflict(mode: HoldMode, active: { hold_id: string; mode: HoldMode; root_task_id: string } | null): KandevError {
  const what = mode === 'pause' ? 'no active pause hold on this task' : 'no active cancel hold on this task';
  return conflict(what, active ? { active_hold_id: active.hold_id, active_hold_mode: active.mode, active_hold_root_task_id: active.root_task_id } : undefined);
}
