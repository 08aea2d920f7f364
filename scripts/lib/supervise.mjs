// Restart policy for `npm start`'s services: a crashed service comes back after a backoff that
// doubles with each recent crash; a service that keeps crashing is a crash loop, and restarting it
// forever would only hide that, so npm start gives up (stops everything, exit code 1).
/** @typedef {{ limit: number, windowMs: number, baseMs: number, maxMs: number }} RestartPolicy */

/**
 * @param {string | undefined} v
 * @param {number} d
 */
const num = (v, d) => (v !== undefined && v !== '' && Number.isFinite(Number(v)) ? Number(v) : d);

/**
 * From the environment: KANDEV_RESTART_LIMIT crashes within KANDEV_RESTART_WINDOW_MS = a crash loop.
 * @returns {RestartPolicy}
 */
export function restartPolicy(env = process.env) {
  return {
    limit: num(env.KANDEV_RESTART_LIMIT, 5),
    windowMs: num(env.KANDEV_RESTART_WINDOW_MS, 60_000),
    baseMs: num(env.KANDEV_RESTART_BACKOFF_MS, 500),
    maxMs: 10_000,
  };
}

/**
 * What to do about a crash at `now`, given the earlier crash times of the same service (ms).
 * Returns the crash times to remember and either `{giveUp: true}` or `{delayMs}`.
 * @param {number[]} crashes
 * @param {number} now
 * @param {RestartPolicy} policy
 * @returns {{ crashes: number[], giveUp: true, count: number } | { crashes: number[], giveUp: false, delayMs: number, count: number }}
 */
export function decideRestart(crashes, now, policy) {
  const recent = [...crashes.filter((t) => now - t < policy.windowMs), now];
  if (recent.length >= policy.limit) return { crashes: recent, giveUp: true, count: recent.length };
  const delayMs = Math.min(policy.maxMs, policy.baseMs * 2 ** (recent.length - 1));
  return { crashes: recent, giveUp: false, delayMs, count: recent.length };
}
