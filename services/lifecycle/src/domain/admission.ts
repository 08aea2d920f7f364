/*
 * Launch admission (overload): each lifecycle instance starts at most `concurrency`
 * agents at a time; the rest wait in a bounded queue. A launch either starts within `maxWaitMs`
 * or is refused — at once when the queue ahead of it already predicts a longer wait — with a
 * retry-after hint. Nothing waits until its caller times out.
 */

export interface GateState {
  /** Launches spawning now (agentctl started, agent not ready yet). */
  running: number;
  /** Launches queued behind them. */
  waiting: number;
  /** Recent launch duration (exponentially weighted), ms. */
  typicalLaunchMs: number;
}

export interface GateLimits {
  concurrency: number;
  maxWaitMs: number;
}

export type GateDecision = { kind: 'start' } | { kind: 'wait' } | { kind: 'refuse'; retryAfterMs: number };

/** What to do with one more launch. The predicted wait: the waves of launches ahead of it. */
export function admitLaunch(st: GateState, limits: GateLimits): GateDecision {
  if (st.running < limits.concurrency && st.waiting === 0) return { kind: 'start' };
  const wavesAhead = Math.ceil((st.waiting + 1) / limits.concurrency);
  const expectedWaitMs = wavesAhead * st.typicalLaunchMs;
  if (expectedWaitMs > limits.maxWaitMs) return { kind: 'refuse', retryAfterMs: expectedWaitMs };
  return { kind: 'wait' };
}

/** Exponentially weighted launch duration: recent launches count most, one outlier little. */
export function nextTypicalLaunchMs(prev: number, sampleMs: number, weight = 0.3): number {
  return Math.round(prev * (1 - weight) + sampleMs * weight);
}
