import type { Hold } from '@kandev/contracts';
import type { Tx } from '@kandev/runtime';

/**
 * Gate a hold's members. Idempotent by hold id; a hold already released (tombstone) gates
 * nothing, and a member's gate only moves to a newer hold, so redelivered events cannot undo a
 * later state. Returns false when the hold is released.
 */
export async function gateHold(tx: Tx, hold: Hold): Promise<boolean> {
  await tx`INSERT INTO hold_gates (hold_id, root_task_id, mode, created_at, released_at)
           VALUES (${hold.id}, ${hold.root_task_id}, ${hold.mode}, ${hold.created_at}, ${hold.released_at})
           ON CONFLICT (hold_id) DO UPDATE SET released_at = COALESCE(hold_gates.released_at, EXCLUDED.released_at)`;
  const [gate] = await tx<{ released_at: string | null }[]>`SELECT released_at FROM hold_gates WHERE hold_id = ${hold.id} FOR UPDATE`;
  if (gate!.released_at) {
    await tx`DELETE FROM held_tasks WHERE hold_id = ${hold.id}`;
    return false;
  }
  await tx`INSERT INTO held_tasks (task_id, hold_id, mode, hold_created_at)
           SELECT m.task_id, ${hold.id}::uuid, ${hold.mode}, ${hold.created_at}::timestamptz
           FROM jsonb_to_recordset(${tx.json(hold.members as never)}) AS m(task_id uuid)
           ON CONFLICT (task_id) DO UPDATE SET hold_id = EXCLUDED.hold_id, mode = EXCLUDED.mode, hold_created_at = EXCLUDED.hold_created_at
           WHERE held_tasks.hold_created_at < EXCLUDED.hold_created_at`;
  return true;
}

/** Ungate a released hold's members and leave its tombstone. Idempotent. */
export async function ungateHold(tx: Tx, hold: Hold): Promise<boolean> {
  const releasedAt = hold.released_at ?? new Date().toISOString();
  await tx`INSERT INTO hold_gates (hold_id, root_task_id, mode, created_at, released_at)
           VALUES (${hold.id}, ${hold.root_task_id}, ${hold.mode}, ${hold.created_at}, ${releasedAt})
           ON CONFLICT (hold_id) DO UPDATE SET released_at = COALESCE(hold_gates.released_at, EXCLUDED.released_at)`;
  const gone = await tx`DELETE FROM held_tasks WHERE hold_id = ${hold.id} RETURNING task_id`;
  return gone.length > 0;
}
