/**
 * Liveness of an instance's executions. Both bounds derive from the registry TTL, so
 * the registry and the agents agree on when an instance is gone.
 */

/** How often an owner re-puts its registry entries and sends agentctl its heartbeat: three per TTL. */
export const registryRefreshMs = (ttlMs: number): number => Math.max(100, Math.floor(ttlMs / 3));

/**
 * The refresh period cut into slices: a timer ticks once per slice and renews the executions of
 * that slice, so each is renewed once per period and the renewals are spread over it.
 */
export function refreshSlices(periodMs: number, maxSlices = 10): { tickMs: number; slices: number } {
  const slices = Math.max(1, Math.min(maxSlices, Math.floor(periodMs / 20)));
  return { tickMs: Math.floor(periodMs / slices), slices };
}

/** The slice an execution is renewed in: fixed for its lifetime (from its id), spread evenly. */
export function refreshSliceOf(executionId: string, slices: number): number {
  let h = 0;
  for (let i = 0; i < executionId.length; i++) h = (h * 31 + executionId.charCodeAt(i)) >>> 0;
  return h % slices;
}

/**
 * How long agentctl lets its owner stay silent before stopping the agent, unless configured: twice
 * the TTL. After one TTL the owner's registry entries have lapsed and the orchestrator may give the
 * session up; a stall that ends within the second TTL is still re-admitted on resume (flows/readmit.ts)
 * if the session is wanted, and one that lasts longer costs the agent. An agent therefore runs without
 * a registry entry for at most one TTL plus agentctl's stop grace, however long its owner is frozen.
 */
export const ownerSilenceBound = (ttlMs: number, configuredMs?: number): number => configuredMs ?? 2 * ttlMs;
