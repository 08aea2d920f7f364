import { overloaded } from '@kandev/contracts';
import { metrics } from '@kandev/runtime';
import { admitLaunch, admitReservedLaunch, nextTypicalLaunchMs, type GateLimits } from './domain/admission.js';

interface Waiter {
  resolve(release: () => void): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

/** The per-instance launch queue (see domain/admission.ts). */
export class LaunchGate {
  private running = 0;
  private readonly waiters: Waiter[] = [];
  private typicalLaunchMs = 2_000;
  /** Reservations (ADR 0026) whose launch has not arrived, each dropped after its TTL. */
  private readonly reservations = new Map<string, NodeJS.Timeout>();

  constructor(
    private readonly limits: GateLimits,
    private readonly reservationTtlMs = 5_000,
  ) {}

  get state() {
    return { running: this.running, waiting: this.waiters.length, typicalLaunchMs: this.typicalLaunchMs, reserved: this.reservations.size };
  }

  /** A place is held for this execution's launch (ADR 0026). */
  isReserved(executionId: string): boolean {
    return this.reservations.has(executionId);
  }

  private refusal(retryAfterMs: number) {
    metrics.launchRefusals.inc();
    return overloaded(
      `lifecycle is busy: ${this.running} launches running, ${this.waiters.length} waiting, ${this.reservations.size} reserved`,
      retryAfterMs / 1000,
      {
        running: this.running,
        waiting: this.waiters.length,
        reserved: this.reservations.size,
      },
    );
  }

  /**
   * ADR 0026: the admission decision asked before the caller writes anything. Throws the refusal
   * (UNAVAILABLE, retry_after_s) at once when the queue predicts too long a wait; otherwise holds a
   * place for `executionId` until its launch arrives or the TTL passes. Idempotent per execution.
   */
  reserve(executionId: string): void {
    if (this.reservations.has(executionId)) return;
    const d = admitLaunch(this.state, this.limits);
    if (d.kind === 'refuse') throw this.refusal(d.retryAfterMs);
    const timer = setTimeout(() => this.reservations.delete(executionId), this.reservationTtlMs);
    timer.unref();
    this.reservations.set(executionId, timer);
  }

  /** Resolves with a release function once the launch may start; throws UNAVAILABLE (retry-after) when it may not. */
  acquire(executionId?: string): Promise<() => void> {
    const reservation = executionId === undefined ? undefined : this.reservations.get(executionId);
    if (reservation) {
      clearTimeout(reservation);
      this.reservations.delete(executionId!);
    }
    const d = reservation ? admitReservedLaunch(this.state, this.limits) : admitLaunch(this.state, this.limits);
    if (d.kind === 'start') {
      metrics.launchWait.observe(0);
      return Promise.resolve(this.slot());
    }
    if (d.kind === 'refuse') return Promise.reject(this.refusal(d.retryAfterMs));
    const queuedAt = performance.now();
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        resolve: (release) => {
          metrics.launchWait.observe((performance.now() - queuedAt) / 1000);
          resolve(release);
        },
        reject,
        timer: setTimeout(() => {
          const i = this.waiters.indexOf(w);
          if (i >= 0) this.waiters.splice(i, 1);
          metrics.launchRefusals.inc();
          reject(overloaded(`lifecycle is busy: the launch could not start within ${this.limits.maxWaitMs} ms`, this.typicalLaunchMs / 1000));
        }, this.limits.maxWaitMs),
      };
      this.waiters.push(w);
    });
  }

  private slot(): () => void {
    this.running++;
    const started = performance.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running--;
      this.typicalLaunchMs = nextTypicalLaunchMs(this.typicalLaunchMs, performance.now() - started);
      const next = this.waiters.shift();
      if (next) {
        clearTimeout(next.timer);
        next.resolve(this.slot());
      }
    };
  }
}
