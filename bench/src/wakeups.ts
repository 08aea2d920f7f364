import type postgres from 'postgres';

/**
 * Queued wakeups of held tasks, written straight into the holds schema (the gate's own input): a
 * pause gate over 200 tasks, then `n` queued wakeups spread over them when `queue` is called (the
 * drain starts at once, so callers start their clock just before it).
 */
export async function heldWakeups(sql: postgres.Sql, workspaceId: string, n: number): Promise<{ queue(): Promise<void> }> {
  const hold = (await sql<{ id: string }[]>`SELECT gen_random_uuid() AS id`)[0]!.id;
  await sql`INSERT INTO holds.hold_gates (hold_id, root_task_id, mode, created_at) VALUES (${hold}, gen_random_uuid(), 'pause', now())`;
  await sql`INSERT INTO holds.held_tasks (task_id, hold_id, mode, hold_created_at) SELECT gen_random_uuid(), ${hold}, 'pause', now() FROM generate_series(1, 200)`;
  return {
    async queue() {
      await sql`INSERT INTO holds.wakeups (id, task_id, workspace_id, reason, status)
                SELECT gen_random_uuid(), h.task_id, ${workspaceId}, 'bench', 'queued' FROM generate_series(1, ${n / 200}) JOIN holds.held_tasks h ON h.hold_id = ${hold}`;
    },
  };
}
