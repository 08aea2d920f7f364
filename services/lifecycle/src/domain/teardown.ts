import { createHash } from 'node:crypto';
import type { EventDataOf, Execution } from '@kandev/contracts';

/*
 * The rules of tearing an execution down (R-6.3, B-4), free of I/O so they are easy to test. The
 * executor (flows/teardown.ts) performs them: STOPPING in the registry → agentctl `POST /stop` →
 * (agentctl silent) SIGTERM the agent ourselves → grace → SIGKILL → reconcile until both processes
 * are gone → `execution.stopped` → registry key deleted.
 */

export type StopHow = EventDataOf<'execution.stopped'>['how'];

export interface TeardownRequest {
  reason: string;
  graceMs: number;
  orphaned: boolean;
  /** agentctl ended without being asked (crashed, or killed from outside): the execution died. */
  agentctlDied?: { code: number | null; signal: string | null } | undefined;
}

/** Never wait longer than a bound the caller cannot see: a stop's grace is capped. */
export const MAX_GRACE_MS = 600_000;

export function teardownGrace(requested: number | undefined, fallback: number): number {
  return Math.min(requested ?? fallback, MAX_GRACE_MS);
}

/** At service shutdown every execution is torn down within a third of the shutdown budget. */
export function shutdownGrace(graceMs: number, shutdownTimeoutMs: number): number {
  return Math.max(0, Math.min(graceMs, Math.floor(shutdownTimeoutMs / 3)));
}

/** What we learnt while stopping, from which the recorded `how` follows. */
export interface StopObservation {
  /** The agent was already gone before we asked it to stop (it exited on its own). */
  exitedOnItsOwn: boolean;
  /** agentctl's own account, when it answered `POST /api/v1/stop`. */
  agentctlHow?: 'graceful' | 'killed' | undefined;
  /** We had to send SIGKILL to the agent ourselves. */
  killedByUs: boolean;
  /** agentctl ended without being asked; what we then did to the agent was cleanup, not a stop. */
  agentctlDied?: { code: number | null; signal: string | null } | undefined;
}

/**
 * How the execution ended. A dead agentctl is the execution dying, whatever our cleanup of the
 * agent then looked like: `killed` when a signal took agentctl down, `exited` when it exited by
 * itself. Never `graceful`: nobody asked it to stop.
 */
export function stopHow(o: StopObservation): StopHow {
  if (o.agentctlDied) return o.agentctlDied.signal ? 'killed' : 'exited';
  if (o.exitedOnItsOwn) return 'exited';
  if (o.killedByUs) return 'killed';
  return o.agentctlHow ?? 'graceful';
}

/**
 * HTTP budget for `POST /api/v1/stop`: agentctl spends the grace as one deadline (the turn's cancel,
 * then SIGTERM, SIGKILL at the deadline, ADR 0061), then waits briefly for the turn to
 * report; beyond that it is silent, and what is left of the agent is SIGKILLed directly.
 */
export function stopRequestTimeoutMs(graceMs: number): number {
  return graceMs + 3_000;
}

/**
 * How long after the start of a teardown the lifecycle SIGKILLs an agent that is still there
 * itself (R-10.5: gone within the grace + 1 s of its logical cancel). agentctl's own SIGKILL is due
 * at the grace; this is the backstop for an agentctl that is late, leaving it BACKSTOP_SLACK_MS.
 */
export const BACKSTOP_SLACK_MS = 300;
export function backstopDelayMs(graceMs: number): number {
  return graceMs + BACKSTOP_SLACK_MS;
}

/**
 * The event id of an execution's `execution.stopped`: a function of the execution, because an
 * execution stops once. A teardown that journalled its report and was killed before dropping the
 * execution from its state file reports it again, as `lost`, when the instance starts again; with
 * the same id that second report is the same event (JetStream's duplicate window drops it, and the
 * consumers' inboxes would), not a second stop. A UUID of version 8 (RFC 9562, name-based).
 */
export function stoppedEventId(executionId: string): string {
  const h = createHash('sha256').update(`execution.stopped\n${executionId}`).digest().subarray(0, 16);
  h[6] = (h[6]! & 0x0f) | 0x80;
  h[8] = (h[8]! & 0x3f) | 0x80;
  const x = h.toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

export function stoppedEvent(
  exec: Pick<Execution, 'execution_id' | 'pid'>,
  how: StopHow,
  req: { reason: string; graceMs: number | null; orphaned: boolean },
  exit: { code: number | null; signal: string | null },
): EventDataOf<'execution.stopped'> {
  return {
    execution_id: exec.execution_id,
    how,
    grace_ms: req.graceMs,
    reason: req.reason,
    pid: exec.pid,
    exit_code: exit.code,
    signal: exit.signal,
    orphaned: req.orphaned,
  };
}

/** One execution a previous run of this instance left behind (state file and/or registry). */
export interface Leftover {
  execution_id: string;
  workspace_id: string;
  task_id: string;
  session_id: string;
  pid: number | null;
}

/**
 * Start-up cleanup: everything this instance id recorded in its state file, plus every
 * registry entry it still owns, is reported lost exactly once.
 */
export function leftoversToReport(fromStateFile: readonly Leftover[], fromRegistry: readonly Execution[], instanceId: string): Leftover[] {
  const out = new Map<string, Leftover>();
  for (const l of fromStateFile) out.set(l.execution_id, l);
  for (const e of fromRegistry) {
    if (e.instance_id !== instanceId || out.has(e.execution_id)) continue;
    out.set(e.execution_id, { execution_id: e.execution_id, workspace_id: e.workspace_id, task_id: e.task_id, session_id: e.session_id, pid: e.pid });
  }
  return [...out.values()];
}
