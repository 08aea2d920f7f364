import { overloaded } from '@kandev/contracts';
import { admitLaunch, nextTypicalLaunchMs, type GateLimits } from './domain/admission.js';

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

  constructor(private readonly limits: GateLimits) {}

  get state() {
    return { running: this.running, waiting: this.waiters.length, typicalLaunchMs: this.typicalLaunchMs };
  }

  /** Resolves with a release function once the launch may start; throws UNAVAILABLE (retry-after) when it may not. */
  acquire(): Promise<() => void> {
    const d = admitLaunch(this.state, this.limits);
    if (d.kind === 'start') return Promise.resolve(this.slot());
    if (d.kind === 'refuse') {
      return Promise.reject(overloaded(`lifecycle is busy: ${this.running} launches running, ${this.waiters.length} waiting`, d.retryAfterMs / 1000, { running: this.running, waiting: this.waiters.length }));
    }
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          const i = this.waiters.indexOf(w);
          if (i >= 0) this.waiters.splice(i, 1);
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
