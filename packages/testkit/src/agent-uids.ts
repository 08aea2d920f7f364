/**
 * AGENT_UID_RANGE for the lifecycle instances a test starts. Instances with different work roots
 * (one per test file) do not see each other's uid locks, so two vitest workers starting agents at
 * the same time could pick the same uid; the end-of-execution sweep of that uid would then kill
 * the other file's agent. Each vitest worker (VITEST_POOL_ID, 1..maxWorkers) gets a slice of its
 * own, below the 29_990-29_991 that services/lifecycle's isolation test uses.
 */
export function workerAgentUidRange(env: NodeJS.ProcessEnv = process.env): string {
  if (env.AGENT_UID_RANGE) return env.AGENT_UID_RANGE;
  const slot = (Math.max(1, Number(env.VITEST_POOL_ID) || 1) - 1) % 9;
  const first = 20_000 + slot * 1_000;
  return `${first}-${first + 999}`;
}
