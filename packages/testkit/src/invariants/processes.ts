// Nothing runs that should not, and nothing says it runs when it does not (B-4): agent
// processes, sessions and tasks against the registry, each tolerated for its recovery bound.
import { ACTIVE_SESSION_STATES, isLiveExecution, Life, type Execution } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import { hasEnded, readProcStat } from '@kandev/runtime/host';
import type postgres from 'postgres';
import type { Violation } from './types.js';

export interface InvariantBounds {
  /** A stopped or held task's agent must be gone this long after its session left the active states. */
  graceMs: number;
  /** An active session without a live execution, or a task IN_PROGRESS with nothing active, is tolerated this long. */
  reconcileMs: number;
}

interface SessionRow {
  id: string;
  task_id: string;
  state: string;
  execution_id: string | null;
  age_ms: number;
}

const ACTIVE: readonly string[] = ACTIVE_SESSION_STATES;
/** Active states in which an execution must exist (CREATED has not asked for one yet). */
const NEEDS_EXECUTION: readonly string[] = ACTIVE_SESSION_STATES.filter((s) => s !== 'CREATED');

/** The process runs (a zombie waiting to be reaped counts as gone). */
function pidAlive(pid: number): boolean {
  const st = readProcStat(pid);
  return st !== undefined && !hasEnded(st.state);
}

/** `agentPids` maps session id → the agent pid the test saw for it (the API reports it while the execution lives). */
export async function processViolations(
  sql: postgres.Sql,
  nc: NatsConnection,
  agentPids: ReadonlyMap<string, number>,
  bounds: InvariantBounds,
): Promise<Violation[]> {
  const out: Violation[] = [];
  const sessions = await sql<SessionRow[]>`
    SELECT id, task_id, state, execution_id, (extract(epoch FROM now() - updated_at) * 1000)::int AS age_ms
    FROM orchestrator.sessions`;
  for (const s of sessions) {
    const pid = agentPids.get(s.id);
    if (!ACTIVE.includes(s.state) && pid !== undefined && pidAlive(pid)) {
      out.push({
        invariant: 'agent_outlived_stop',
        detail: `session ${s.id} is ${s.state} for ${s.age_ms} ms but its agent pid ${pid} still runs`,
        ageMs: s.age_ms,
        boundMs: bounds.graceMs,
      });
    }
    if (NEEDS_EXECUTION.includes(s.state)) {
      let e: Execution | null = null;
      if (s.execution_id) e = await request(nc, Life.get, { execution_id: s.execution_id, task_id: s.task_id }, { timeoutMs: 10_000 });
      if (!e || !isLiveExecution(e.status)) {
        out.push({
          invariant: 'active_session_without_execution',
          detail: `session ${s.id} is ${s.state} for ${s.age_ms} ms; its execution ${s.execution_id ?? '(none)'} is ${e ? e.status : 'not registered'}`,
          ageMs: s.age_ms,
          boundMs: bounds.reconcileMs,
        });
      }
    }
  }
  const tasks = await sql<{ id: string; age_ms: number }[]>`
    SELECT t.id, (extract(epoch FROM now() - t.updated_at) * 1000)::int AS age_ms FROM orchestrator.tasks t
    WHERE t.status = 'IN_PROGRESS' AND NOT EXISTS (
      SELECT 1 FROM orchestrator.sessions s WHERE s.task_id = t.id AND s.state = ANY(${[...ACTIVE]}))
      -- A paused tree keeps its statuses (R-4.2) ...
      AND NOT EXISTS (SELECT 1 FROM orchestrator.tree_hold_members m WHERE m.task_id = t.id AND m.active)
      -- ... and a resume or restore that left it IN_PROGRESS with nothing running told the operator
      -- so (ADR 0025: audited task.needs_attention since its last session activity): not silent.
      AND NOT EXISTS (
        SELECT 1 FROM orchestrator.audit_log a WHERE a.task_id = t.id AND a.action = 'task.needs_attention'
          AND a.created_at >= COALESCE((SELECT max(s.updated_at) FROM orchestrator.sessions s WHERE s.task_id = t.id), '-infinity'::timestamptz))`;
  for (const t of tasks) {
    const lastSession = sessions.filter((s) => s.task_id === t.id).reduce((min, s) => Math.min(min, s.age_ms), Infinity);
    const quietFor = Math.min(t.age_ms, lastSession);
    out.push({
      invariant: 'task_in_progress_without_session',
      detail: `task ${t.id} is IN_PROGRESS with no active session for ${quietFor} ms`,
      ageMs: quietFor,
      boundMs: bounds.reconcileMs,
    });
  }
  return out;
}
