/**
 * Stop decisions before teardowns (ADR 0012). A teardown is the expensive half of a stop: agentctl
 * and the agent wake up, an agent process exits, events follow. On a burst of stops those costs
 * land on the cores the next decisions need, and every caller waits for work its answer does not
 * depend on (R-1.5: the answer confirms the logical cancellation, not the process exit). So a
 * teardown dispatched after an answer-at-commit waits while this instance still has stop decisions
 * in flight, and never longer than `maxWaitMs`: lets a CANCELLED session and its living
 * process disagree for the grace period plus a small bound, and this is part of that bound. A
 * lone stop never waits: its own decision has left by the time its teardown is ready.
 *
 * Per instance, in memory: another replica's decisions do not delay this one's teardowns, and a
 * teardown lost to a crash while waiting is re-sent by the reconciler, as one lost right after
 * commit always was.
 */
export class TeardownYield {
  private deciding = 0;
  private readonly waiting = new Set<() => void>();
  private closed = false;

  constructor(private readonly maxWaitMs: number) {}

  /** Run one stop decision (its transaction); teardowns yield while any is running. */
  async decision<T>(fn: () => Promise<T>): Promise<T> {
    this.deciding++;
    try {
      return await fn();
    } finally {
      if (--this.deciding === 0) this.releaseAll();
    }
  }

  /** Resolves when no stop decision is in flight, or after `maxWaitMs`, whichever comes first. */
  turn(): Promise<void> {
    if (this.deciding === 0 || this.maxWaitMs <= 0 || this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const go = () => {
        clearTimeout(timer);
        this.waiting.delete(go);
        resolve();
      };
      const timer = setTimeout(go, this.maxWaitMs);
      this.waiting.add(go);
    });
  }

  /** The instance is stopping: whatever waits goes now, and nothing waits any more. */
  close(): void {
    this.closed = true;
    this.releaseAll();
  }

  /** Stop decisions in flight (the tests read it). */
  get inFlight(): number {
    return this.deciding;
  }

  private releaseAll(): void {
    for (const go of [...this.waiting]) go();
  }
}
