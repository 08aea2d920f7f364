import postgres from 'postgres';
import type { BenchStack } from '../e2e.js';

/**
 * A task tree of `n` tasks under a root made through the API, written straight into the
 * orchestrator's schema (creating thousands through HTTP would only measure task creation).
 * Breadth-first with `fanout` children per task: depth grows like log(n).
 */
export async function seedTree(b: BenchStack, workspaceId: string, n: number, fanout = 10): Promise<{ root: string; ids: string[] }> {
  const root = (await b.api.ok('POST', '/tasks', { workspace_id: workspaceId, title: `bench tree ${n}` })).id as string;
  const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
  try {
    const [row] = await sql<{ ids: string[] }[]>`
      WITH new AS (
        SELECT i, gen_random_uuid() AS id FROM generate_series(1, ${n - 1}) AS i
      ), placed AS (
        SELECT n.id, n.i, CASE WHEN (n.i - 1) / ${fanout} = 0 THEN ${root}::uuid ELSE p.id END AS parent_id
        FROM new n LEFT JOIN new p ON p.i = (n.i - 1) / ${fanout}
      ), ins AS (
        INSERT INTO orchestrator.tasks (id, workspace_id, parent_id, title, status)
        SELECT id, ${workspaceId}, parent_id, 'seeded ' || i, 'IN_PROGRESS' FROM placed ORDER BY i
        RETURNING id
      ) SELECT array_agg(id) AS ids FROM ins`;
    return { root, ids: [root, ...(row?.ids ?? [])] };
  } finally {
    await sql.end();
  }
}
