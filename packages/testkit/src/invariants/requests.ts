// "No accepted request is lost without an error to its caller": every control request a
// test recorded (control-requests.ts) and was answered with success has its effect in the database;
// a request that was never answered is lost by definition.
import type postgres from 'postgres';
import type { ControlRequest } from '../control-requests.js';
import { at, type Violation } from './types.js';

type Tx = postgres.TransactionSql;
interface AuditRow {
  action: string;
  outcome: string;
  details: Record<string, any>;
  created_at: Date;
}

/** Slack on the caller's clock when matching a row by time (same host, so only scheduling). */
const CLOCK_SLACK_MS = 2_000;

export async function requestViolations(tx: Tx, requests: readonly ControlRequest[]): Promise<Violation[]> {
  const out: Violation[] = [];
  const lost = (r: ControlRequest, why: string) =>
    out.push(
      at(
        'accepted_request_lost',
        `${r.kind} of task ${r.task_id}${r.session_id ? ` session ${r.session_id}` : ''} answered ${JSON.stringify(r.answer.ok ? r.answer.body : r.answer.error)}, but ${why}`,
      ),
    );
  const byRequest = (r: ControlRequest) =>
    tx<AuditRow[]>`SELECT action, outcome, details, created_at FROM orchestrator.audit_log WHERE request_id = ${r.request_id ?? ''} AND task_id = ${r.task_id}`;
  const sessionStates = async (ids: readonly string[]) =>
    new Map(
      (await tx<{ id: string; state: string }[]>`SELECT id, state FROM orchestrator.sessions WHERE id = ANY(${[...ids]}::uuid[])`).map((s) => [s.id, s.state]),
    );

  for (const r of requests) {
    if (r.answer.ok === null) {
      out.push(at('accepted_request_lost', `${r.kind} of task ${r.task_id} sent at ${r.sentAt.toISOString()} got no answer and no error`));
      continue;
    }
    if (r.kind === 'message.interrupt') {
      // Stored once or not at all, whatever the answer: never lost once accepted, never doubled.
      const [n] = await tx<{ turns: number; queued: number }[]>`
        SELECT (SELECT count(*)::int FROM orchestrator.turns t JOIN orchestrator.sessions s ON s.id = t.session_id WHERE s.task_id = ${r.task_id} AND t.prompt = ${r.prompt!}) AS turns,
               (SELECT count(*)::int FROM orchestrator.queued_messages WHERE task_id = ${r.task_id} AND prompt = ${r.prompt!}) AS queued`;
      const copies = n!.turns + n!.queued;
      if (copies > 1)
        out.push(at('effect_applied_twice', `interrupt of task ${r.task_id} "${r.prompt}" is there ${copies} times (${n!.turns} turns, ${n!.queued} queued)`));
      if (r.answer.ok && copies === 0) lost(r, 'the message is neither queued nor a turn');
    }
    if (!r.answer.ok) continue;
    const body = r.answer.body;
    switch (r.kind) {
      case 'task.stop':
      case 'child.stop': {
        const action = r.kind === 'task.stop' ? 'task.stop' : 'mcp.stop_task';
        const expected = r.kind === 'task.stop' ? 'stopped' : body.status;
        const row = (await byRequest(r)).find((a) => a.action === action && a.outcome === expected);
        if (!row) {
          lost(r, `no ${action} audit row with outcome ${expected} for request ${r.request_id}`);
          break;
        }
        const named: string[] = [
          ...new Set<string>([...(row.details.sessions ?? []), ...(body.executions ?? []).filter((e: any) => !e.orphaned).map((e: any) => e.session_id)]),
        ];
        const states = await sessionStates(named);
        for (const id of named) if (states.get(id) !== 'CANCELLED') lost(r, `session ${id} it stopped is ${states.get(id) ?? 'missing'}`);
        break;
      }
      case 'session.cancel': {
        const from = new Date(r.sentAt.getTime() - CLOCK_SLACK_MS);
        const to = new Date(r.answeredAt.getTime() + CLOCK_SLACK_MS);
        // The turn's closing is compared in SQL: timestamps carry microseconds, a JS Date does not.
        const rows = await tx<(AuditRow & { turn_cancelled: boolean })[]>`
          SELECT a.action, a.outcome, a.details, a.created_at,
                 EXISTS (SELECT 1 FROM orchestrator.turns t WHERE t.session_id = ${r.session_id!}::uuid AND t.stop_reason = 'cancelled' AND t.completed_at = a.created_at) AS turn_cancelled
          FROM orchestrator.audit_log a
          WHERE a.task_id = ${r.task_id} AND a.action = 'agent.cancel' AND a.details->>'session_id' = ${r.session_id!}
            AND a.outcome IN ('cancelled', 'no_active_turn') AND a.created_at BETWEEN ${from} AND ${to}`;
        if (!rows.length) {
          lost(r, 'no agent.cancel audit row with a success outcome while it was in flight');
          break;
        }
        for (const row of rows.filter((a) => a.outcome === 'cancelled' && !a.turn_cancelled)) {
          lost(r, `its audit row says cancelled at ${row.created_at.toISOString()} but no turn of the session was cancelled then`);
        }
        break;
      }
      case 'message.interrupt': {
        const rows = await byRequest(r);
        if (body.status === 'started') {
          if (!rows.some((a) => a.action === 'session.start')) lost(r, 'no session.start audit row for it');
          break;
        }
        const row = rows.find((a) => a.action === 'mcp.message_task.interrupt');
        if (!row || row.outcome !== body.status) {
          lost(r, `its audit row says ${row?.outcome ?? 'nothing'}`);
          break;
        }
        if (body.status === 'sent') {
          const [turn] =
            await tx`SELECT id FROM orchestrator.turns WHERE id = ${row.details.turn_id ?? null} AND session_id = ${body.session_id} AND prompt = ${r.prompt!}`;
          if (!turn) lost(r, `the turn ${row.details.turn_id} its audit row names does not carry the message`);
        }
        break;
      }
      case 'tree.pause':
      case 'tree.cancel': {
        const [hold] = await tx<
          { id: string; released_at: Date | null }[]
        >`SELECT id, released_at FROM orchestrator.tree_holds WHERE id = ${body.hold?.id ?? null} AND mode = ${r.kind.slice('tree.'.length)} AND request_id = ${r.request_id ?? ''}`;
        if (!hold) {
          lost(r, `hold ${body.hold?.id} is not recorded`);
          break;
        }
        // While the hold stands, no session of a member that was there before it is active: the hold stopped them all, in its transaction.
        if (hold.released_at) break;
        const live = await tx<{ id: string; state: string }[]>`
          SELECT s.id, s.state FROM orchestrator.sessions s JOIN orchestrator.tree_hold_members m ON m.task_id = s.task_id AND m.hold_id = ${hold.id}
          JOIN orchestrator.tree_holds h ON h.id = m.hold_id
          WHERE s.state IN ('STARTING', 'RUNNING', 'WAITING_FOR_INPUT') AND s.created_at < h.created_at`;
        for (const s of live) lost(r, `session ${s.id} of a member is ${s.state} under the hold`);
        break;
      }
      case 'tree.resume':
      case 'tree.restore': {
        // Released once, by this request: the hold it names is released and its members' release rows carry this request id.
        const [hold] = await tx<
          { id: string; mode: string; released_at: Date | null }[]
        >`SELECT id, mode, released_at FROM orchestrator.tree_holds WHERE id = ${body.hold?.id ?? null}`;
        if (!hold?.released_at) {
          lost(r, `hold ${body.hold?.id} is ${hold ? 'still active' : 'not recorded'}`);
          break;
        }
        const rows = await tx<{ task_id: string; n: number }[]>`
          SELECT task_id, count(*)::int AS n FROM orchestrator.audit_log WHERE request_id = ${r.request_id ?? ''} AND action = ${r.kind} AND outcome = 'released' GROUP BY task_id`;
        if (!rows.some((x) => x.task_id === r.task_id)) lost(r, `no ${r.kind} audit row of the root with outcome released for request ${r.request_id}`);
        for (const x of rows.filter((y) => y.n > 1))
          out.push(at('effect_applied_twice', `${r.kind} request ${r.request_id} released task ${x.task_id} ${x.n} times`));
        if (r.kind === 'tree.restore') {
          const still = await tx<{ task_id: string }[]>`
            SELECT m.task_id FROM orchestrator.tree_hold_members m JOIN orchestrator.tasks t ON t.id = m.task_id
            WHERE m.hold_id = ${hold.id} AND m.skip_reason IS NULL AND t.status = 'CANCELLED' AND m.task_status <> 'CANCELLED'`;
          for (const t of still) lost(r, `member ${t.task_id} it restored is still CANCELLED`);
        }
        break;
      }
      case 'wakeup.create': {
        // One wakeup per idempotency key, whatever the retries; once dispatched, its session is the task's.
        const ws = await tx<
          { id: string; status: string; session_id: string | null }[]
        >`SELECT id, status, session_id FROM holds.wakeups WHERE idempotency_key = ${r.idempotency_key ?? ''}`;
        if (ws.length !== 1 || ws[0]!.id !== body.id) {
          lost(r, `wakeup ${body.id} is ${ws.length ? `not the one stored for its key (${ws.map((x) => x.id).join(', ')})` : 'not stored'}`);
          break;
        }
        const sid = ws[0]!.session_id;
        if (sid && !(await tx`SELECT 1 FROM orchestrator.sessions WHERE id = ${sid} AND task_id = ${r.task_id}`).length)
          lost(r, `its session ${sid} is not a session of the task`);
        break;
      }
    }
  }
  return out;
}
