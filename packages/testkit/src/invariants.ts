// The system's safety invariants, checked from the outside against a running stack (issue 11). Fault
// tests inject a fault, let the system recover, and then require `assertInvariants` to pass within
// the documented bounds (docs/operations.md "Fault tolerance: bounds and guarantees").
import { ACTIVE_SESSION_STATES, isLiveExecution, Life, type Execution } from '@kandev/contracts';
import { connectNats, request } from '@kandev/runtime';
import { readFileSync } from 'node:fs';
import postgres from 'postgres';
import type { Stack } from './stack.js';

export interface InvariantBounds {
  /** A stopped or held task's agent must be gone this long after its session left the active states. */
  graceMs: number;
  /** An active session without a live execution, or a task IN_PROGRESS with nothing active, is tolerated this long. */
  reconcileMs: number;
}

export interface Violation {
  invariant: 'agent_outlived_stop' | 'active_session_without_execution' | 'task_in_progress_without_session';
  detail: string;
  /** How long the state has been this way; a violation once past its bound, pending before. */
  ageMs: number;
  boundMs: number;
}

export interface InvariantReport {
  /** Wrong for longer than the bound allows. */
  violations: Violation[];
  /** Wrong, but still within the bound: the system may yet fix it. */
  pending: Violation[];
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
const NEEDS_EXECUTION: readonly string[] = ['STARTING', 'RUNNING', 'WAITING_FOR_INPUT'];

/** The process runs (a zombie waiting to be reaped counts as gone). */
function pidAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}

/**
 * One pass over the invariants. `agentPids` maps session id → the agent pid the test saw for it
 * (the API reports it while the execution lives).
 */
export async function checkInvariants(stack: Stack, opts: { agentPids: ReadonlyMap<string, number>; bounds: InvariantBounds }): Promise<InvariantReport> {
  const { bounds } = opts;
  const sql = postgres(stack.db.url, { max: 1, onnotice: () => undefined });
  const nc = await connectNats({ url: stack.nats.url, name: 'invariant-checker' });
  const out: Violation[] = [];
  const suspect = (v: Violation) => out.push(v);
  try {
    const sessions = await sql<SessionRow[]>`
      SELECT id, task_id, state, execution_id, (extract(epoch FROM now() - updated_at) * 1000)::int AS age_ms
      FROM orchestrator.sessions`;
    for (const s of sessions) {
      const pid = opts.agentPids.get(s.id);
      if (!ACTIVE.includes(s.state) && pid !== undefined && pidAlive(pid)) {
        suspect({ invariant: 'agent_outlived_stop', detail: `session ${s.id} is ${s.state} for ${s.age_ms} ms but its agent pid ${pid} still runs`, ageMs: s.age_ms, boundMs: bounds.graceMs });
      }
      if (NEEDS_EXECUTION.includes(s.state)) {
        let e: Execution | null = null;
        if (s.execution_id) e = await request(nc, Life.get, { execution_id: s.execution_id, task_id: s.task_id }, { timeoutMs: 10_000 });
        if (!e || !isLiveExecution(e.status)) {
          suspect({ invariant: 'active_session_without_execution', detail: `session ${s.id} is ${s.state} for ${s.age_ms} ms; its execution ${s.execution_id ?? '(none)'} is ${e ? e.status : 'not registered'}`, ageMs: s.age_ms, boundMs: bounds.reconcileMs });
        }
      }
    }
    const tasks = await sql<{ id: string; age_ms: number }[]>`
      SELECT t.id, (extract(epoch FROM now() - t.updated_at) * 1000)::int AS age_ms FROM orchestrator.tasks t
      WHERE t.status = 'IN_PROGRESS' AND NOT EXISTS (
        SELECT 1 FROM orchestrator.sessions s WHERE s.task_id = t.id AND s.state = ANY(${[...ACTIVE]}))`;
    for (const t of tasks) {
      const lastSession = sessions.filter((s) => s.task_id === t.id).reduce((min, s) => Math.min(min, s.age_ms), Infinity);
      const quietFor = Math.min(t.age_ms, lastSession);
      suspect({ invariant: 'task_in_progress_without_session', detail: `task ${t.id} is IN_PROGRESS with no active session for ${quietFor} ms`, ageMs: quietFor, boundMs: bounds.reconcileMs });
    }
  } finally {
    await nc.close().catch(() => undefined);
    await sql.end({ timeout: 2 }).catch(() => undefined);
  }
  return { violations: out.filter((v) => v.ageMs > v.boundMs), pending: out.filter((v) => v.ageMs <= v.boundMs) };
}

/**
 * Poll `checkInvariants` until nothing is wrong any more. Fails at once on a violation (something
 * wrong past its bound), and when `withinMs` (the recovery bound the test claims, with headroom)
 * runs out while something is still pending. Checking early therefore proves nothing by itself:
 * it passes only once every suspect state has been fixed by the system.
 */
export async function assertInvariants(stack: Stack, opts: { agentPids: ReadonlyMap<string, number>; bounds: InvariantBounds; withinMs: number }): Promise<void> {
  const deadline = Date.now() + opts.withinMs;
  const show = (vs: Violation[]) => vs.map((v) => `  ${v.invariant}: ${v.detail} (bound ${v.boundMs} ms)`).join('\n');
  for (;;) {
    const { violations, pending } = await checkInvariants(stack, opts);
    if (violations.length) throw new Error(`invariants violated:\n${show(violations)}${pending.length ? `\npending:\n${show(pending)}` : ''}`);
    if (pending.length === 0) return;
    if (Date.now() > deadline) throw new Error(`not recovered within ${opts.withinMs} ms:\n${show(pending)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
