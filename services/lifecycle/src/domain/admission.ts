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
  /**
   * Launches reserved ahead of their request (`life.exec.reserve`, ADR 0026) that have not arrived
   * yet: the orchestrator asked before writing its session, and they come next.
   */
  reserved?: number;
}

export interface GateLimits {
  concurrency: number;
  maxWaitMs: number;
}

export type GateDecision = { kind: 'start' } | { kind: 'wait' } | { kind: 'refuse'; retryAfterMs: number };

/** What to do with one more launch. The predicted wait: the waves of launches ahead of it. */
export function admitLaunch(st: GateState, limits: GateLimits): GateDecision {
  // Reserved launches take free slots first; those that find none queue like waiters.
  const reserved = st.reserved ?? 0;
  const free = Math.max(0, limits.concurrency - st.running);
  if (reserved < free && st.waiting === 0) return { kind: 'start' };
  const ahead = st.waiting + Math.max(0, reserved - free);
  const wavesAhead = Math.ceil((ahead + 1) / limits.concurrency);
  const expectedWaitMs = wavesAhead * st.typicalLaunchMs;
  if (expectedWaitMs > limits.maxWaitMs) return { kind: 'refuse', retryAfterMs: expectedWaitMs };
  return { kind: 'wait' };
}

/** Exponentially weighted launch duration: recent launches count most, one outlier little. */
export function nextTypicalLaunchMs(prev: number, sampleMs: number, weight = 0.3): number {
  return Math.round(prev * (1 - weight) + sampleMs * weight);
}

/**
 * A launch that arrives with its reservation (ADR 0026) was promised a place: it starts when a slot
 * is free and nobody waits, else it waits (within the queue bound); it is never refused at once.
 */
export function admitReservedLaunch(st: GateState, limits: GateLimits): Exclude<GateDecision, { kind: 'refuse' }> {
  return st.running < limits.concurrency && st.waiting === 0 ? { kind: 'start' } : { kind: 'wait' };
}
