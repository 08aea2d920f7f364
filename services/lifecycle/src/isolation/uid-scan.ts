import { setTimeout as sleep } from 'node:timers/promises';
import { pidsByUid } from '@kandev/runtime/host';

/**
 * Which processes hold a uid, for the sweep at the end of every isolated execution, from passes
 * over /proc that the teardowns of one moment share. A pass reads every process's status (about
 * 10 ms of this service's main thread with a few hundred processes on the host), and a tree hold
 * ends a hundred executions within a second or two: one pass each would take a second of the
 * control plane's CPU from the very processes that are ending (ADR 0049).
 *
 * A caller always gets a pass that starts after its call (a process that outlived its agentctl is
 * never missed), and passes start at least `spacingMs` apart: the callers that ask meanwhile wait
 * for the next one together. After a quiet spell the pass starts at once.
 */
export class UidScan {
  private due: Promise<ReadonlyMap<number, readonly number[]>> | null = null;
  private lastStarted = -Infinity;

  constructor(
    private readonly spacingMs: number,
    private readonly scan: () => ReadonlyMap<number, readonly number[]> = pidsByUid,
  ) {}

  /** The pids that hold `uid` in a pass over /proc started after this call. */
  async pidsOf(uid: number): Promise<readonly number[]> {
    return (await this.next()).get(uid) ?? [];
  }

  private next(): Promise<ReadonlyMap<number, readonly number[]>> {
    this.due ??= this.afterSpacing();
    return this.due;
  }

  private async afterSpacing(): Promise<ReadonlyMap<number, readonly number[]>> {
    await sleep(Math.max(0, this.lastStarted + this.spacingMs - performance.now()));
    // A call from here on waits for the next pass.
    this.due = null;
    this.lastStarted = performance.now();
    return this.scan();
  }
}
