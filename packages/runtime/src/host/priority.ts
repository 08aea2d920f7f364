import { getPriority, setPriority } from 'node:os';

/*
 * Nice values (setpriority(2)). Unprivileged, a process may only lower a priority (raise a nice
 * value), so nothing here ever raises one. A nice value ranks a process against the others of its
 * autogroup only, where the kernel groups by session (autogroup.ts).
 */

/** Sets `pid` `increment` nice levels below this process (capped at 19); throws what setpriority refused. */
export function niceBelowOwn(pid: number, increment: number): void {
  setPriority(pid, Math.min(19, getPriority() + increment));
}

/**
 * Takes `pid`'s nice value for this process when it is the lower priority of the two; never raises
 * this one's. Returns whether it changed; false too when `pid` is gone (no priority to read).
 */
export function yieldPriorityTo(pid: number): boolean {
  try {
    const target = getPriority(pid);
    if (target <= getPriority()) return false;
    setPriority(target);
    return true;
  } catch {
    return false;
  }
}
