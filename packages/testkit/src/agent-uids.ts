/**
 * AGENT_UID_RANGE for the lifecycle instances a test starts. Instances on one host see each other's
 * uid locks (the host's lock directory), but test files running in parallel would still contend for
 * the same few uids at the bottom of one range, and a uid's
 * end-of-execution sweep (it SIGKILLs the uid's processes for a few seconds) reaches whatever runs
 * under it. Each vitest worker gets a slice of 500 uids of its own: by VITEST_POOL_ID
 * (1..maxWorkers) within a run, and by the run (vitest's pid, the workers' parent) across runs on
 * one host, which makes two runs' slices meet rarely instead of always at 20000. The slices stay
 * inside lifecycle's default range and below the 29_990-29_991 of services/lifecycle's isolation
 * test. Outside vitest (the benches) it is undefined: lifecycle's own default range. `runPid` is
 * the run's vitest process: a worker's parent, or the process itself in a global setup.
 */
export function workerAgentUidRange(env: NodeJS.ProcessEnv = process.env, runPid = process.ppid): string | undefined {
  if (env.AGENT_UID_RANGE) return env.AGENT_UID_RANGE;
  if (!env.VITEST_POOL_ID) return undefined;
  const SLICES = 19;
  const pool = Math.max(1, Number(env.VITEST_POOL_ID) || 1) - 1;
  const slot = (runPid + pool) % SLICES;
  const first = 20_000 + slot * 500;
  return `${first}-${first + 499}`;
}
