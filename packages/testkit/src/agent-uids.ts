/**
 * AGENT_UID_RANGE for the lifecycle instances a test starts. Instances with different work roots
 * (one per test file, or another checkout's tests on the same host) do not see each other's uid
 * locks, so two of them starting agents at the same time could pick the same uid; the
 * end-of-execution sweep of that uid (it SIGKILLs the uid's processes for a few seconds) would then
 * kill the other's agent. Each vitest worker gets a slice of 500 uids of its own: by VITEST_POOL_ID
 * (1..maxWorkers) within a run, and by the run (vitest's pid, the workers' parent) across runs on
 * one host, which makes two runs' slices meet rarely instead of always at 20000. The slices stay
 * inside lifecycle's default range and below the 29_990-29_991 of services/lifecycle's isolation
 * test. Outside vitest (the benches) it is undefined: lifecycle's own default range.
 */
export function workerAgentUidRange(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.AGENT_UID_RANGE) return env.AGENT_UID_RANGE;
  if (!env.VITEST_POOL_ID) return undefined;
  const SLICES = 19;
  const pool = Math.max(1, Number(env.VITEST_POOL_ID) || 1) - 1;
  const slot = (process.ppid + pool) % SLICES;
  const first = 20_000 + slot * 500;
  return `${first}-${first + 499}`;
}
