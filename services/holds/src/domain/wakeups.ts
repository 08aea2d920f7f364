import { skipReasonOf, WakeupSkipReasons, type HoldMode } from '@kandev/contracts';

/** How a launch attempt ends a claimed wakeup (R-4.3, docs/requirements.md; POST /wakeups). */
export type LaunchVerdict =
  | { kind: 'launched'; session_id: string }
  | { kind: 'refused'; hold_mode: HoldMode | null; reason: string; skip_reason?: string | undefined }
  | { kind: 'failed'; error: string };

export type WakeupOutcome = { status: 'finished'; skip_reason: string | null; session_id: string | null } | { status: 'queued' };

/**
 * A refused launch carries the start rule's reason (`task_cancelled`, `tree_paused`, …, R-10.1), or
 * from an orchestrator that predates it the hold's; a failed one retries until its attempts run out.
 * A launch that joined a start in flight is `launched` with the session it joined.
 */
export function outcomeOf(verdict: LaunchVerdict, attempts: number, maxAttempts: number): WakeupOutcome {
  switch (verdict.kind) {
    case 'launched':
      return { status: 'finished', skip_reason: null, session_id: verdict.session_id };
    case 'refused':
      return {
        status: 'finished',
        skip_reason: verdict.skip_reason ?? (verdict.hold_mode ? skipReasonOf(verdict.hold_mode) : WakeupSkipReasons.launchRefused),
        session_id: null,
      };
    case 'failed':
      return attempts >= maxAttempts ? { status: 'finished', skip_reason: WakeupSkipReasons.launchFailed, session_id: null } : { status: 'queued' };
  }
}

/** The prompt a wakeup's session starts with: payload.prompt when it is a non-empty string. */
export function promptOf(payload: unknown): string | undefined {
  const p = typeof payload === 'object' && payload !== null ? (payload as Record<string, unknown>).prompt : undefined;
  return typeof p === 'string' && p.length > 0 ? p : undefined;
}
