import { eventSubject, isKandevError, OrchMcpClarification, unavailable, type AskOutcome, type ClarificationWait } from '@kandev/contracts';
import { parseEvent, request, type NatsConnection } from '@kandev/runtime';
import { outcomeOf } from './domain/clarification-outcome.js';
import type { ToolContext } from './tools/tool.js';

/**
 * Holding an `ask_user_questions` call open until its bundle closes (ADR 0007).
 *
 * The answer may land on any gateway and orchestrator replica, so the wait is not an in-memory
 * promise the responder resolves. Each waiter renews a lease on its bundle through the
 * orchestrator (which is also how it learns the bundle's state), and wakes early on the
 * `clarification.closed` event. One core subscription per process serves every waiter; a missed
 * message costs at most one renewal interval, never a hung call. The wait is bounded by the
 * bundle's expiry.
 */

interface Watch {
  /** Resolves when a close event for the bundle arrives (or already arrived), after `ms`, or when `signal` aborts. */
  next(ms: number, signal: AbortSignal): Promise<void>;
  close(): void;
}

/** Close events of the last minute, so one that lands before its waiter is registered is not lost. */
const RECENT_MS = 60_000;
const RECENT_MAX = 10_000;

class ClosedEvents {
  private readonly watchers = new Map<string, Set<() => void>>();
  private readonly recent = new Map<string, number>();
  /** Resolves once the server knows the subscription: an ask sent after this cannot close unseen. */
  readonly ready: Promise<void>;

  constructor(nc: NatsConnection) {
    nc.subscribe(eventSubject('clarification.closed'), {
      callback: (err, msg) => {
        if (err) return;
        let bundleId: string;
        try {
          const ev = parseEvent(msg.data);
          if (ev.type !== 'clarification.closed') return;
          bundleId = (ev.data as { bundle: { id: string } }).bundle.id;
        } catch {
          return; // a malformed event wakes nobody; the next renewal still reports the truth
        }
        this.remember(bundleId);
        this.watchers.get(bundleId)?.forEach((wake) => wake());
      },
    });
    this.ready = nc.flush();
  }

  private remember(bundleId: string): void {
    const now = Date.now();
    this.recent.set(bundleId, now);
    for (const [id, at] of this.recent) {
      if (this.recent.size <= RECENT_MAX && at > now - RECENT_MS) break;
      this.recent.delete(id);
    }
  }

  watch(bundleId: string): Watch {
    let signalled = this.recent.has(bundleId);
    let wake: (() => void) | null = null;
    const onEvent = () => {
      signalled = true;
      wake?.();
    };
    const set = this.watchers.get(bundleId) ?? new Set();
    set.add(onEvent);
    this.watchers.set(bundleId, set);
    return {
      next: (ms, signal) =>
        new Promise<void>((resolve) => {
          if (signalled || signal.aborted) {
            signalled = false;
            return resolve();
          }
          const timer = setTimeout(done, ms);
          signal.addEventListener('abort', done, { once: true });
          function done() {
            clearTimeout(timer);
            signal.removeEventListener('abort', done);
            wake = null;
            signalled = false;
            resolve();
          }
          wake = done;
        }),
      close: () => {
        set.delete(onEvent);
        if (set.size === 0) this.watchers.delete(bundleId);
      },
    };
  }
}

const perConnection = new WeakMap<NatsConnection, ClosedEvents>();
export function closedEvents(nc: NatsConnection): ClosedEvents {
  let events = perConnection.get(nc);
  if (!events) {
    events = new ClosedEvents(nc);
    perConnection.set(nc, events);
  }
  return events;
}

const detachedOutcome = (w: ClarificationWait): AskOutcome =>
  outcomeOf(w.bundle) ?? {
    bundle_id: w.bundle.id,
    status: 'detached',
    detached: true,
    reason: w.bundle.detached_reason,
    answers: [],
    questions: w.bundle.questions,
  };

/**
 * Wait for the outcome of the bundle `ask` just stored. Every exit is typed; only a lost orchestrator
 * at the deadline is an error. When the call's client goes away (`ctx.signal`: it cancelled the call
 * or closed the connection) the bundle is detached at once, so the operator sees that nobody waits
 * for the answer any more instead of a live waiter until the turn ends or the wait expires.
 */
export async function awaitOutcome(ctx: ToolContext, first: ClarificationWait): Promise<AskOutcome> {
  const bundleId = first.bundle.id;
  const deadline = Date.now() + first.expires_in_ms;
  const watch = closedEvents(ctx.nc).watch(bundleId);
  const ids = { caller_task_id: ctx.caller.task_id, agent_token: ctx.callerToken, bundle_id: bundleId };
  let state = first;
  try {
    for (;;) {
      const outcome = outcomeOf(state.bundle);
      if (outcome) return outcome;
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        state = await request(ctx.nc, OrchMcpClarification.expire, ids, { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs });
        return detachedOutcome(state);
      }
      await watch.next(Math.min(state.renew_every_ms, remaining), ctx.signal);
      if (ctx.signal.aborted) {
        // Nobody reads this result; if the release does not get through, the lapsing lease detaches the bundle.
        state = await request(ctx.nc, OrchMcpClarification.release, ids, { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs }).catch(() => state);
        return detachedOutcome(state);
      }
      // Shutting down: stop renewing, so the lease lapses and the bundle shows as detached.
      if (ctx.nc.isClosed() || ctx.nc.isDraining()) throw unavailable('mcp instance is shutting down; the question stays open for the operator');
      try {
        // Renewal is bounded well inside the lease, so a slow reply cannot outlive it unnoticed.
        state = await request(ctx.nc, OrchMcpClarification.renew, ids, { requestId: ctx.requestId, timeoutMs: Math.max(1_000, 2 * state.renew_every_ms) });
      } catch (e) {
        // The orchestrator is unreachable for now: keep waiting. If this outlasts the lease, the
        // next renewal that gets through learns the waiter was detached meanwhile.
        if (!isKandevError(e) || e.code !== 'UNAVAILABLE') throw e;
      }
    }
  } finally {
    watch.close();
  }
}
