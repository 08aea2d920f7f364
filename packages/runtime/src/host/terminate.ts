import { trace } from '@opentelemetry/api';
import { HAS_PROC, isAlive, liveStat, readProcStat, type ProcessRef } from './process-tree.js';

/*
 * The one way a process is ended, in agentctl (the agent's tree) and in the lifecycle service
 * (agents and agentctl, and what a previous run left behind). One schedule, so every stop in the
 * system behaves and logs alike:
 *
 *   1. `signal` (SIGTERM by default; none when the processes were already asked to go some other
 *      way) to every target still there, each together with its process group;
 *   2. up to `graceMs` for all of them to be gone, checked every POLL_MS, and at once when one of
 *      `exits` settles (the exit event of a child of ours: no poll delay on the common path). While
 *      one of `exits` is pending its process is there, so no check is made: the wait sleeps until
 *      that exit or the deadline;
 *   3. SIGKILL to every survivor, with its group;
 *   4. wait until gone, checked every POLL_MS, SIGKILL re-sent to survivors after 50, 100, 200, …
 *      ms (doubling, at most 2 s apart): a signal to a group can race a fork in it, and a process
 *      in uninterruptible sleep takes SIGKILL late. It gives up, returning the survivors, once
 *      `killWindowMs` has passed since the first SIGKILL, or when `giveUp()` says so before a re-send.
 *
 * Grace 0 means no grace: SIGKILL at once, nothing sent before it.
 */

/** How often a wait checks whether the processes are gone. */
export const POLL_MS = 20;

/** Delay before the (attempt + 1)-th SIGKILL re-send: 50, 100, 200, … ms, at most 2 s. */
export function killRetryDelayMs(attempt: number): number {
  return Math.min(2_000, 50 * 2 ** Math.max(0, attempt));
}

export interface TerminateOptions {
  /** Sent first; null: send nothing and only wait out the grace (they were told to go already). Default SIGTERM. */
  signal?: NodeJS.Signals | null;
  /** How long the targets get to be gone before SIGKILL; 0: SIGKILL at once. */
  graceMs: number;
  /**
   * Exit events of targets that are our own children: a wait ends as soon as one settles, and
   * looks at /proc only once all have (a pending one means its target is still there). Only a
   * target's own exit belongs here.
   */
  exits?: readonly Promise<unknown>[];
  /** How long to keep re-sending SIGKILL before giving up. Default: until they are gone. */
  killWindowMs?: number;
  /** Asked before each SIGKILL re-send: true gives up (a shutting-down service leaves the rest to its next start). */
  giveUp?: () => boolean;
  /** Each signal sent (round 0: the first signal, 1: the first SIGKILL, 2…: re-sends), for the caller's log. */
  onSignal?: (signal: NodeJS.Signals, pids: number[], round: number) => void;
}

export interface TerminateResult {
  /** Targets that were still there when SIGKILL became due (they outlived the grace). */
  killed: ProcessRef[];
  /** Targets still there when it gave up; empty when all are gone. */
  survivors: ProcessRef[];
}

/**
 * Ends the targets on the schedule above. `targets` may be a function: it is asked again before
 * every signal and check, so a process tree that grows meanwhile is followed. It answers what is
 * live, and its empty answer ends the wait: it may look wider before it gives one (agentctl scans
 * its tree's process groups), which a filter applied here afterwards would overrule.
 */
export async function terminate(targets: readonly ProcessRef[] | (() => readonly ProcessRef[]), opts: TerminateOptions): Promise<TerminateResult> {
  const alive = typeof targets === 'function' ? () => [...targets()] : () => targets.filter(isAlive);
  const wake = wakeOn(opts.exits ?? []);
  const send = (signal: NodeJS.Signals, round: number): void => {
    const reached = signalProcesses(alive(), signal);
    if (reached.length > 0)
      opts.onSignal?.(
        signal,
        reached.map((p) => p.pid),
        round,
      );
  };
  /** Waits until nothing is alive or `until` (Date.now()) passes; returns whether all are gone. */
  const goneBy = async (until: number): Promise<boolean> => {
    for (;;) {
      // A child of ours that has not exited is a target still there: no look at /proc can end the
      // wait, so none is made. A hundred agentctls of a tree pause, each looking at its agent's tree
      // every POLL_MS while the agents exited, spent more CPU looking than the agents exiting
      // (docs/fast-paths.md, "Tree holds with live sessions").
      if (!wake.waiting() && alive().length === 0) return true;
      const left = until - Date.now();
      if (left <= 0) return false;
      await wake(wake.waiting() ? left : Math.min(POLL_MS, left));
    }
  };

  const signal = opts.signal === undefined ? 'SIGTERM' : opts.signal;
  if (opts.graceMs > 0) {
    if (signal) send(signal, 0);
    if (await goneBy(Date.now() + opts.graceMs)) return { killed: [], survivors: [] };
  }
  const killed = alive();
  if (killed.length === 0) return { killed, survivors: [] };
  send('SIGKILL', 1);
  const giveUpAt = Date.now() + (opts.killWindowMs ?? Number.POSITIVE_INFINITY);
  for (let attempt = 0; ; attempt++) {
    const resendAt = Math.min(giveUpAt, Date.now() + killRetryDelayMs(attempt));
    if (await goneBy(resendAt)) return { killed, survivors: [] };
    if (Date.now() >= giveUpAt || opts.giveUp?.()) return { killed, survivors: alive() };
    send('SIGKILL', attempt + 2);
  }
}

/**
 * Sends `signal` to each process that is still the one we noted, together with its process group:
 * a group is signalled as a whole (once), a process alone only when its group is ours (never
 * signal ourselves) or init's. Returns the processes reached. Without /proc the group a process
 * leads is tried, then the process.
 */
export function signalProcesses(procs: readonly ProcessRef[], signal: NodeJS.Signals): ProcessRef[] {
  const ownGroup = readProcStat(process.pid)?.pgid ?? process.pid;
  const groups = new Set<number>();
  const reached: ProcessRef[] = [];
  const span = trace.getActiveSpan();
  for (const p of procs) {
    if (p.pid === process.pid) continue;
    const pgid = HAS_PROC ? liveStat(p)?.pgid : isAlive(p) ? p.pid : undefined;
    if (pgid === undefined) continue;
    if (groups.has(pgid)) {
      reached.push(p);
      continue;
    }
    const asGroup = pgid !== ownGroup && pgid > 1;
    if (asGroup && kill(-pgid, signal)) {
      groups.add(pgid);
    } else if (!kill(p.pid, signal)) {
      continue;
    }
    span?.addEvent('signal', { signal, 'process.pid': p.pid, ...(asGroup ? { 'process.group': pgid } : {}) });
    reached.push(p);
  }
  return reached;
}

function kill(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false; // gone meanwhile, or (without /proc) not a group leader
  }
}

/**
 * A wait of at most `ms` that ends early when one of `exits` settles; each exit wakes it once.
 * `waiting()`: whether one of them is still pending.
 */
function wakeOn(exits: readonly Promise<unknown>[]): ((ms: number) => Promise<void>) & { waiting: () => boolean } {
  const pending = new Set<Promise<unknown>>();
  for (const e of exits) {
    const tracked: Promise<unknown> = e.then(
      () => pending.delete(tracked),
      () => pending.delete(tracked),
    );
    pending.add(tracked);
  }
  const wait = (ms: number): Promise<void> => settledOrAfter(ms, [...pending]);
  return Object.assign(wait, { waiting: () => pending.size > 0 });
}

/**
 * Resolves once one of `promises` settles (either way) or `ms` have passed, whichever comes first,
 * and clears its timer. A plain timer rather than a promise sleep cut short with an AbortController:
 * each abort builds a DOMException and an AbortError with their stacks, and a tree pause ends
 * hundreds of these waits early (about 40 ms of the lifecycle's sampled CPU at 100 sessions).
 */
export async function settledOrAfter(ms: number, promises: readonly Promise<unknown>[]): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const settled = promises.map((p) => p.then(noop, noop));
  try {
    await Promise.race([new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))), ...settled]);
  } finally {
    clearTimeout(timer);
  }
}

const noop = (): void => undefined;
