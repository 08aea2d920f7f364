import { internalError, isKandevError, type Actor, type SessionState } from '@kandev/contracts';
import type { Logger, Tx } from '@kandev/runtime';
import { decideStops, type StopDecision, type StopPlan, type StopReason, type Teardown } from '../domain/stop.js';
import { sessionStateAfterExecutionEnd } from '../domain/transitions.js';
import { recordAudit, type AuditRecord } from '../store/audit.js';
import { detachPendingBundles } from '../store/clarifications.js';
import { cancelSessions, setSessionState } from '../store/sessions.js';
import { completeOpenTurnsOfSessions } from '../store/turns.js';
import { toSession, type SessionRow } from '../store/rows.js';
import type { Emit, OrchRuntime } from './context.js';

/**
 * The decision half of the one stop pipeline (flows/stop.ts), inside the caller's transaction:
 * under each session's guard, recheck it is active (decideStops), close its open turn, write
 * CANCELLED with the plan's fixed reason, and stage the events from the rows written.
 */

export interface AcceptedStops {
  /** What was decided under the locks. */
  decision: StopDecision;
  /** Sessions this stop moved to CANCELLED, as they are now. */
  cancelled: SessionRow[];
  teardowns: Teardown[];
}

/** A gone execution's session: FAILED, saying so. */
const GONE = { state: sessionStateAfterExecutionEnd('lost', null).state, message: 'agent execution is gone', reason: 'execution_gone' } as const;

interface StopRows {
  cancelled: SessionRow[];
  gone: SessionRow[];
}

/**
 * The writes of a decided stop, on session rows the caller holds locked (the per-session guard).
 * They are independent of one another (each touches its own rows and none reads what another
 * writes), so they go out together, in any order, one round trip for all; whatever must follow
 * them (REVIEW, which reads the sessions) is issued once this resolves.
 */
function stopWrites(tx: Tx, decision: StopDecision, reason: StopReason): Promise<StopRows> {
  return Promise.all([
    completeOpenTurnsOfSessions(tx, decision.cancel, 'cancelled'),
    cancelSessions(tx, decision.cancel, reason),
    // A question an agent of these sessions still waits on has nobody to resume any more.
    detachPendingBundles(tx, decision.cancel, reason),
    completeOpenTurnsOfSessions(tx, decision.gone, 'error'),
    Promise.all(decision.gone.map((id) => setSessionState(tx, id, GONE.state, { error_message: GONE.message, terminal: true }))),
  ]).then(([, cancelled, , , gone]) => ({ cancelled, gone }));
}

/** One session.state_changed per session a stop wrote. */
async function emitStops(
  emit: Emit,
  rows: StopRows,
  before: ReadonlyMap<string, SessionRow>,
  reason: StopReason,
  workspaceId: string,
  actor: Actor,
): Promise<void> {
  for (const after of rows.cancelled) {
    await emit(
      'session.state_changed',
      { workspace_id: workspaceId, task_id: after.task_id, session_id: after.id, actor },
      { session: toSession(after), from: before.get(after.id)!.state, to: 'CANCELLED', reason },
    );
  }
  for (const after of rows.gone) {
    await emit(
      'session.state_changed',
      { workspace_id: workspaceId, task_id: after.task_id, session_id: after.id, actor: null },
      { session: toSession(after), from: before.get(after.id)!.state, to: GONE.state, reason: GONE.reason },
    );
  }
}

/**
 * Recheck under the locks, write, then stage the events from what was written. `alongside` (a
 * stop's audit row) is a write independent of the stop's, sent with them in one round trip.
 */
export async function acceptStops(
  tx: Tx,
  emit: Emit,
  plan: StopPlan,
  locked: readonly SessionRow[],
  workspaceId: string,
  actor: Actor,
  alongside?: (decision: StopDecision) => Promise<unknown>,
): Promise<AcceptedStops> {
  const decision = decideStops(plan, locked);
  const [written] = await Promise.all([stopWrites(tx, decision, plan.reason), alongside?.(decision)]);
  await emitStops(emit, written, new Map(locked.map((s) => [s.id, s])), plan.reason, workspaceId, actor);
  return { decision, cancelled: written.cancelled, teardowns: decision.teardowns };
}

/** Session states once the decision is written: what asks about the task's other sessions. */
export function statesAfter(sessions: readonly SessionRow[], decision: StopDecision): SessionState[] {
  const cancelled = new Set(decision.cancel);
  const gone = new Set(decision.gone);
  return sessions.map((s) => (cancelled.has(s.id) ? 'CANCELLED' : gone.has(s.id) ? sessionStateAfterExecutionEnd('lost', null).state : s.state));
}

/**
 * The error a control action's failed transaction answers with. A refusal (CONFLICT, NOT_FOUND,
 * FORBIDDEN, ...) changed nothing and is answered as it is; anything else rolled back, is logged
 * and recorded (`record`, B-3; null when the task was never read), and answers INTERNAL_ERROR with
 * its cause. Stops and tree holds fail this one way.
 */
export async function failedDecision(rt: OrchRuntime, log: Logger, e: unknown, record: AuditRecord | null, what: string): Promise<Error> {
  if (isKandevError(e) && e.code !== 'INTERNAL_ERROR') return e;
  log.error({ err: e }, `${what}; nothing of it was applied`);
  if (record) await recordAudit(rt.sql, record).catch((err: unknown) => log.warn({ err }, 'audit write failed'));
  else log.warn('it failed before its task was read: no audit row');
  return isKandevError(e) ? e : internalError(what, e);
}
