import { Orch } from '@kandev/contracts';
import { metrics, request } from '@kandev/runtime';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LiveExecution } from '../live-execution.js';
import type { Executions } from './context.js';

/**
 * Registry lapse. The entry was just re-put after a gap longer than the TTL, so it may
 * have lapsed meanwhile (this process stalled, or NATS was unreachable) and the orchestrator's
 * reconciler may have declared the execution lost (session FAILED) or a stop may have bumped the
 * task's fence. Ask the fence again: the same B-1 admission a launch gets. Admitted = the re-put
 * entry stands; refused = nobody wants this agent any more, so it is stopped. Orchestrator
 * unreachable = the entry stays (a stop can find it) and we keep asking, with backoff.
 */
export async function readmit(ctx: Executions, x: LiveExecution, gapMs: number): Promise<void> {
  const { deps } = ctx;
  const { env } = deps;
  if (x.teardown || x.record.status === 'STARTING') return;
  metrics.registryLapses.inc();
  x.log.warn(
    { gap_ms: gapMs, registry_ttl_ms: env.REGISTRY_TTL_MS },
    'registry entry may have lapsed (refresh gap above the TTL); re-registered, asking the launch fence again',
  );
  for (let attempt = 0; !x.teardown && !ctx.shuttingDown(); attempt++) {
    let verdict: { admitted: boolean; reason: string | null };
    try {
      verdict = await request(
        deps.nc,
        Orch.executionAdmit,
        { execution_id: x.id, task_id: x.record.task_id, session_id: x.record.session_id, fence_epoch: x.record.fence_epoch, instance_id: deps.instanceId },
        { timeoutMs: env.REQUEST_TIMEOUT_MS },
      );
    } catch (e) {
      x.log.warn({ err: e, attempt }, 'orchestrator unreachable for re-admission; the execution stays registered, retrying');
      await sleep(Math.min(5_000, 250 * 2 ** attempt));
      continue;
    }
    if (verdict.admitted) {
      x.log.info('execution re-admitted after a registry lapse');
      return;
    }
    x.log.warn({ reason: verdict.reason }, 'execution was given up while its entry lapsed; stopping it');
    await ctx.teardowns.teardown(x, { reason: `registry_lapsed: ${verdict.reason ?? 'not admitted'}`, graceMs: env.TEARDOWN_GRACE_MS, orphaned: true });
    return;
  }
}
