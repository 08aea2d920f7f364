/*
 * Per-instance execution cap and drain (docs/operations.md, "Rolling out lifecycle"). Plain
 * decisions; the supervisor holds the state and does what they say.
 */

/**
 * May this instance take one more execution? `held` counts live executions and launches in
 * progress (an execution id in both counts once). 0 = no cap. A refusal carries a retry hint: a
 * retry lands on whichever instance the queue group picks, usually another one.
 */
export function admitUnderCap(held: number, cap: number): { kind: 'admit' } | { kind: 'refuse'; retryAfterMs: number } {
  if (cap <= 0 || held < cap) return { kind: 'admit' };
  return { kind: 'refuse', retryAfterMs: 5_000 };
}

/** Executions this instance holds: the union of the live ones and the launches in progress. */
export function heldExecutions(live: Iterable<string>, launching: Iterable<string>): Set<string> {
  return new Set([...live, ...launching]);
}

export type DrainMode = 'stop' | 'wait';

/**
 * What a drain reports once its wait is over: `before` are the executions held when it began (plus
 * launches that were in progress then and completed), `remaining` those still held after the wait.
 * Those gone meanwhile finished on their own (or by another stop); with `stop` the rest are to be
 * torn down, with `wait` they are left running.
 */
export function drainOutcome(
  before: ReadonlySet<string>,
  remaining: ReadonlySet<string>,
  mode: DrainMode,
): { finished: string[]; toStop: string[]; left: string[] } {
  const finished = [...before].filter((id) => !remaining.has(id));
  const rest = [...remaining];
  return mode === 'stop' ? { finished, toStop: rest, left: [] } : { finished, toStop: [], left: rest };
}
