// "Every control action has its audit row" (B-3, docs/requirements.md), checked from the state the actions
// leave: each is audited in its own transaction, so state and row are there together or not at all.
import type postgres from 'postgres';
import { at, type Violation } from './types.js';

type Tx = postgres.TransactionSql;

/**
 * - a session CANCELLED by a task stop or a parent's stop is named by a `task.stop` /
 *   `mcp.stop_task` row with outcome `stopped`;
 * - a session CANCELLED by a tree hold, and every member of every hold, has the hold's
 *   `tree.pause` / `tree.cancel` row (and `tree.resume` / `tree.restore` once released);
 * - a turn that reads `cancelled` while its session went on (not closed by the session's own
 *   end) was cancelled by an operator (`agent.cancel` → `cancelled`, same transaction, so the same
 *   instant), by a parent's interrupt (its row names the turn), or — when that request failed after
 *   the agent had cancelled — is recorded as `turn.cancelled` when the agent runtime's report closes it.
 */
export async function auditViolations(tx: Tx): Promise<Violation[]> {
  const out: Violation[] = [];
  const stopped = await tx<{ id: string; task_id: string; cancel_reason: string }[]>`
    SELECT s.id, s.task_id, s.cancel_reason FROM orchestrator.sessions s
    WHERE s.state = 'CANCELLED' AND s.cancel_reason IN ('stopped_by_operator', 'stopped_by_parent_task')
      AND NOT EXISTS (
        SELECT 1 FROM orchestrator.audit_log a
        WHERE a.task_id = s.task_id AND a.action IN ('task.stop', 'mcp.stop_task') AND a.outcome = 'stopped'
          AND a.details->'sessions' ? s.id::text)`;
  for (const s of stopped)
    out.push(at('control_action_unaudited', `session ${s.id} of task ${s.task_id} is CANCELLED (${s.cancel_reason}) but no stop's audit row names it`));

  const held = await tx<{ id: string; task_id: string; cancel_reason: string }[]>`
    SELECT s.id, s.task_id, s.cancel_reason FROM orchestrator.sessions s
    WHERE s.state = 'CANCELLED' AND s.cancel_reason IN ('tree_paused', 'tree_cancelled')
      AND NOT EXISTS (
        SELECT 1 FROM orchestrator.audit_log a
        WHERE a.task_id = s.task_id AND a.action = CASE s.cancel_reason WHEN 'tree_paused' THEN 'tree.pause' ELSE 'tree.cancel' END AND a.outcome = 'held')`;
  for (const s of held)
    out.push(at('control_action_unaudited', `session ${s.id} of task ${s.task_id} is CANCELLED (${s.cancel_reason}) but its task has no hold's audit row`));

  const members = await tx<{ hold_id: string; task_id: string; action: string }[]>`
    SELECT m.hold_id, m.task_id, x.action FROM orchestrator.tree_holds h
    JOIN orchestrator.tree_hold_members m ON m.hold_id = h.id
    CROSS JOIN LATERAL (VALUES ('tree.' || h.mode), (CASE WHEN h.released_at IS NULL THEN NULL WHEN h.mode = 'pause' THEN 'tree.resume' ELSE 'tree.restore' END)) AS x(action)
    WHERE x.action IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM orchestrator.audit_log a WHERE a.task_id = m.task_id AND a.action = x.action AND a.details->>'hold_id' = h.id::text)`;
  for (const m of members) out.push(at('control_action_unaudited', `hold ${m.hold_id}: member task ${m.task_id} has no ${m.action} audit row`));

  const turns = await tx<{ id: string; session_id: string; task_id: string }[]>`
    SELECT t.id, t.session_id, s.task_id FROM orchestrator.turns t JOIN orchestrator.sessions s ON s.id = t.session_id
    WHERE t.stop_reason = 'cancelled'
      AND (s.completed_at IS NULL OR t.completed_at < s.completed_at)
      AND NOT EXISTS (
        SELECT 1 FROM orchestrator.audit_log a
        WHERE a.task_id = s.task_id AND a.details->>'session_id' = s.id::text
          AND ((a.action = 'agent.cancel' AND a.outcome = 'cancelled' AND a.created_at = t.completed_at)
               OR (a.action = 'mcp.message_task.interrupt' AND a.details->>'cancelled_turn_id' = t.id::text)
               OR (a.action = 'turn.cancelled' AND a.details->>'turn_id' = t.id::text)))`;
  for (const t of turns)
    out.push(
      at(
        'control_action_unaudited',
        `turn ${t.id} of session ${t.session_id} (task ${t.task_id}) was cancelled but no cancel or interrupt audit row accounts for it`,
      ),
    );
  return out;
}
