import { eventually, type InvariantBounds } from '@kandev/testkit';
import { startWorld, type World } from './support.js';

/**
 * The stack the fault tests run (issue 11): a short registry TTL and reconcile interval so a fault's
 * recovery fits a test, and the invariant checker's bounds derived from them.
 */
export const REGISTRY_TTL_MS = 3_000;
export const RECONCILE_INTERVAL_MS = 1_000;
export const TEARDOWN_GRACE_MS = 500;
export const bounds: InvariantBounds = {
  graceMs: TEARDOWN_GRACE_MS + 2_000,
  // Registry lapse + reconciler's settle time (5 s) + one interval.
  reconcileMs: REGISTRY_TTL_MS + 5_000 + RECONCILE_INTERVAL_MS,
};
/** Recovery headroom on a busy machine, on top of the bounds. */
export const WITHIN_MS = bounds.reconcileMs + 20_000;

export const startFaultWorld = (): Promise<World> =>
  startWorld({
    REGISTRY_TTL_MS: String(REGISTRY_TTL_MS),
    RECONCILE_INTERVAL_MS: String(RECONCILE_INTERVAL_MS),
    TEARDOWN_GRACE_MS: String(TEARDOWN_GRACE_MS),
    LAUNCH_CONCURRENCY: '2',
    LAUNCH_QUEUE_WAIT_MS: '3000',
  });

/** The running agent's pid of a task's session, remembered in `pids` for the checker. */
export async function agentOf(w: World, pids: Map<string, number>, taskId: string, sessionId: string): Promise<number> {
  const e = await eventually(async () => {
    const list = (await w.api.get(`/tasks/${taskId}/executions`)).body as Array<{ session_id: string; pid: number | null; status: string }>;
    return list.find((x) => x.session_id === sessionId && x.pid && (x.status === 'RUNNING' || x.status === 'READY')) ?? null;
  }, 20_000);
  pids.set(sessionId, e.pid!);
  return e.pid!;
}
