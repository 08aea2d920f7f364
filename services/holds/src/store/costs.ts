import { randomUUID } from 'node:crypto';
import type { CostSummary } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;

export interface TreeNode {
  id: string;
  workspace_id: string;
  parent_id: string | null;
}

export async function treeNode(q: Q, taskId: string): Promise<TreeNode | null> {
  const [row] = await q<TreeNode[]>`SELECT task_id AS id, workspace_id, parent_id FROM task_tree WHERE task_id = ${taskId}`;
  return row ?? null;
}

/**
 * Add a task's path (root first) to the projection, each row with its tree's root (a budget is
 * found by it, B-8). Tasks are never re-parented, so existing rows stay.
 */
export async function upsertLineage(q: Q, chain: readonly TreeNode[]): Promise<void> {
  if (!chain.length) return;
  const rootId = (chain.find((n) => n.parent_id === null) ?? chain[0]!).id;
  await q`INSERT INTO task_tree (task_id, workspace_id, parent_id, root_id)
          SELECT n.id, n.workspace_id, n.parent_id, ${rootId}::uuid FROM jsonb_to_recordset(${q.json(chain as never)}) AS n(id uuid, workspace_id uuid, parent_id uuid)
          ON CONFLICT (task_id) DO NOTHING`;
}

export interface CostRow {
  id: string;
  task_id: string;
  session_id: string | null;
  usage_event_id: string;
  model: string | null;
  cost_cents: string | number;
  tokens_in: string | number;
  tokens_cached_in: string | number;
  tokens_out: string | number;
  occurred_at: string;
  priced: boolean;
}
const COLUMNS = [
  'id',
  'task_id',
  'session_id',
  'usage_event_id',
  'model',
  'cost_cents',
  'tokens_in',
  'tokens_cached_in',
  'tokens_out',
  'occurred_at',
  'priced',
];
const cols = (q: Q) => q(COLUMNS);

/**
 * Record one cost event and fold it into its task's rollup in the same transaction. The same
 * usage_event_id again changes nothing and returns the event already recorded (B-5).
 */
export async function recordCost(
  tx: Tx,
  e: {
    task_id: string;
    session_id: string | null;
    usage_event_id: string;
    model: string | null;
    cost_cents: number;
    tokens_in: number;
    tokens_cached_in: number;
    tokens_out: number;
    occurred_at: string | null;
    priced: boolean;
  },
): Promise<{ row: CostRow; duplicate: boolean }> {
  const [row] = await tx<CostRow[]>`
    INSERT INTO cost_events (id, task_id, session_id, usage_event_id, model, cost_cents, tokens_in, tokens_cached_in, tokens_out, occurred_at, priced)
    VALUES (${randomUUID()}, ${e.task_id}, ${e.session_id}, ${e.usage_event_id}, ${e.model}, ${e.cost_cents}, ${e.tokens_in}, ${e.tokens_cached_in}, ${e.tokens_out},
            COALESCE(${e.occurred_at}::timestamptz, now()), ${e.priced})
    ON CONFLICT (usage_event_id) DO NOTHING RETURNING ${cols(tx)}`;
  if (!row) {
    const [existing] = await tx<CostRow[]>`SELECT ${cols(tx)} FROM cost_events WHERE usage_event_id = ${e.usage_event_id}`;
    return { row: existing!, duplicate: true };
  }
  await tx`INSERT INTO task_costs (task_id, events, unpriced_events, cost_cents, tokens_in, tokens_cached_in, tokens_out)
           VALUES (${e.task_id}, 1, ${e.priced ? 0 : 1}, ${e.cost_cents}, ${e.tokens_in}, ${e.tokens_cached_in}, ${e.tokens_out})
           ON CONFLICT (task_id) DO UPDATE SET events = task_costs.events + 1, unpriced_events = task_costs.unpriced_events + EXCLUDED.unpriced_events,
             cost_cents = task_costs.cost_cents + EXCLUDED.cost_cents,
             tokens_in = task_costs.tokens_in + EXCLUDED.tokens_in, tokens_cached_in = task_costs.tokens_cached_in + EXCLUDED.tokens_cached_in,
             tokens_out = task_costs.tokens_out + EXCLUDED.tokens_out`;
  return { row, duplicate: false };
}

/** one recursive query over the subtree (archived and hidden tasks included) joined with the per-task rollups. */
export async function treeCost(q: Q, rootId: string): Promise<Omit<CostSummary, 'task_id' | 'include_descendants'>> {
  const [row] = await q<{ task_count: number; cost_cents: string; tokens_in: string; tokens_cached_in: string; tokens_out: string; unpriced_events: string }[]>`
    WITH RECURSIVE tree AS (
       SELECT task_id FROM task_tree WHERE task_id = ${rootId}
       UNION ALL
       SELECT c.task_id FROM task_tree c JOIN tree ON c.parent_id = tree.task_id
     )
     SELECT count(*) FILTER (WHERE c.events > 0)::int AS task_count, COALESCE(sum(c.cost_cents), 0) AS cost_cents,
            COALESCE(sum(c.tokens_in), 0) AS tokens_in, COALESCE(sum(c.tokens_cached_in), 0) AS tokens_cached_in, COALESCE(sum(c.tokens_out), 0) AS tokens_out,
            COALESCE(sum(c.unpriced_events), 0) AS unpriced_events
     FROM tree JOIN task_costs c ON c.task_id = tree.task_id`;
  return {
    task_count: row!.task_count,
    cost_cents: Number(row!.cost_cents),
    tokens_in: Number(row!.tokens_in),
    tokens_cached_in: Number(row!.tokens_cached_in),
    tokens_out: Number(row!.tokens_out),
    unpriced_events: Number(row!.unpriced_events),
  };
}
