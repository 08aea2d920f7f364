/**
 * Liveness of an instance's executions. Both bounds derive from the registry TTL, so
 * the registry and the agents agree on when an instance is gone.
 */

/** How often an owner re-puts its registry entries and sends agentctl its heartbeat: three per TTL. */
export const registryRefreshMs = (ttlMs: number): number => Math.max(100, Math.floor(ttlMs / 3));

/**
 * How long agentctl lets its owner stay silent before stopping the agent, unless configured: twice
 * the TTL. After one TTL the owner's registry entries have lapsed and the orchestrator may give the
 * session up; a stall that ends within the second TTL is still re-admitted on resume (flows/readmit.ts)
 * if the session is wanted, and one that lasts longer costs the agent. An agent therefore runs without
 * a registry entry for at most one TTL plus agentctl's stop grace, however long its owner is frozen.
 */
export const ownerSilenceBound = (ttlMs: number, configuredMs?: number): number => configuredMs ?? 2 * ttlMs;
