import { isKandevError, OrchTree } from '@kandev/contracts';
import { transaction, request } from '@kandev/runtime';
import { outcomeOf, promptOf, type LaunchVerdict } from '../domain/wakeups.js';
import { claimWakeups, finishWakeup, renewClaims, requeueStaleClaims, requeueWakeup, type WakeupRow } from '../store/wakeups.js';
import type { HoldsRuntime } from './context.js';

/**
 * The wakeup dispatcher: claims queued wakeups (gating held ones in the same statement) and asks
 * the orchestrator to launch a session for each admitted one. The orchestrator's launch is keyed
 * by wakeup id and refuses a held task under its row lock, so a hold that lands between the
 * claim and the launch still wins: the wakeup is finished with the hold's skip reason, or its
 * session is stopped by the hold. Every replica runs one; SKIP LOCKED keeps them apart.
 */
export function startDispatcher(rt: HoldsRuntime): { kick(): void; stop(): Promise<void> } {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | null = null;
  let again = false;
  let stopped = false;
  const log = rt.log.child({ component: 'wakeup-dispatcher' });

  async function launch(w: WakeupRow): Promise<void> {
    let verdict: LaunchVerdict;
    try {
      const prompt = promptOf(w.payload);
      const res = await request(
        rt.nc,
        OrchTree.wakeupLaunch,
        { wakeup_id: w.id, task_id: w.task_id, ...(prompt ? { prompt } : {}) },
        {
          requestId: `wakeup-${w.id}`,
          timeoutMs: rt.env.WAKEUP_LAUNCH_TIMEOUT_MS,
        },
      );
      verdict = res.launched
        ? { kind: 'launched', session_id: res.session_id }
        : { kind: 'refused', hold_mode: res.hold_mode, reason: res.reason, skip_reason: res.skip_reason };
    } catch (e) {
      verdict = { kind: 'failed', error: isKandevError(e) ? `${e.code}: ${e.message}` : String(e) };
    }
    const outcome = outcomeOf(verdict, w.attempts, rt.env.WAKEUP_MAX_ATTEMPTS);
    const ids = { wakeup_id: w.id, task_id: w.task_id };
    if (outcome.status === 'queued') {
      log.warn({ ...ids, attempts: w.attempts, verdict }, 'wakeup launch failed; queued again');
      await requeueWakeup(rt.sql, w.id);
    } else {
      log.info({ ...ids, session_id: outcome.session_id, skip_reason: outcome.skip_reason }, 'wakeup dispatched');
      await finishWakeup(rt.sql, w.id, outcome);
    }
  }

  /** Launches in flight: they run beside the claim loop, so a slow launch never holds up the gate. */
  const launching = new Set<Promise<void>>();
  /** The wakeups of those launches, whose claims this dispatcher keeps renewing. */
  const claimedHere = new Set<string>();
  // Claims are renewed three times per WAKEUP_CLAIM_TIMEOUT_MS while their launch runs, so a claim
  // goes stale only when its dispatcher stopped (died, froze, lost the database): another replica
  // then takes it after that bound, however long a launch may take (WAKEUP_LAUNCH_TIMEOUT_MS).
  const renewer = setInterval(
    () => {
      renewClaims(rt.sql, [...claimedHere], rt.instanceId).catch((e: unknown) =>
        log.warn({ err: e }, 'renewing wakeup claims failed; they may be taken again (the launch is keyed, so once)'),
      );
    },
    Math.max(50, Math.floor(rt.env.WAKEUP_CLAIM_TIMEOUT_MS / 3)),
  ).unref();

  async function round(): Promise<number> {
    await requeueStaleClaims(rt.sql, rt.env.WAKEUP_CLAIM_TIMEOUT_MS);
    // Claim no more than there is room to launch; the rest waits in the queue (it is durable).
    const room = Math.max(0, rt.env.WAKEUP_BATCH * 4 - launching.size);
    if (room === 0) return 0;
    const claimed = (await transaction(rt.sql, (tx) => claimWakeups(tx, Math.min(rt.env.WAKEUP_BATCH, room), rt.instanceId))) as Array<
      WakeupRow & { gate_mode: string | null }
    >;
    for (const w of claimed.filter((x) => x.gate_mode))
      log.info({ wakeup_id: w.id, task_id: w.task_id, skip_reason: w.skip_reason }, 'wakeup gated by a tree hold');
    for (const w of claimed.filter((x) => !x.gate_mode)) {
      claimedHere.add(w.id);
      const p: Promise<void> = launch(w)
        .catch((e) => log.error({ err: e, wakeup_id: w.id }, 'recording a wakeup outcome failed'))
        .finally(() => {
          claimedHere.delete(w.id);
          launching.delete(p);
          if (!stopped) void run(); // room again: the queue may hold more
        });
      launching.add(p);
    }
    return claimed.length;
  }

  /** Rounds until the queue is drained; one at a time per replica. */
  function run(): Promise<void> {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      try {
        do {
          again = false;
          while (!stopped && (await round()) === rt.env.WAKEUP_BATCH);
        } while (again && !stopped);
      } catch (e) {
        log.warn({ err: e }, 'dispatch round failed');
      } finally {
        running = null;
      }
    })();
    return running;
  }

  const tick = () => {
    void run().finally(() => {
      if (!stopped) timer = setTimeout(tick, rt.env.WAKEUP_POLL_MS).unref();
    });
  };
  timer = setTimeout(tick, rt.env.WAKEUP_POLL_MS).unref();
  return {
    kick: () => void run(),
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      clearInterval(renewer);
      await running;
      await Promise.allSettled([...launching]);
    },
  };
}
