import { readdirSync } from 'node:fs';
import { HAS_PROC, readProcStat } from '@kandev/agentctl/process-tree';

/*
 * OS process handles that survive pid reuse: a pid is only ever signalled together with the start
 * time read from /proc/<pid>/stat when we learnt it, so a recycled pid is never killed.
 */

export interface ProcessRef {
  pid: number;
  /** Field 22 of /proc/<pid>/stat (clock ticks since boot); null where /proc is unavailable. */
  startTime: string | null;
}


export function processRef(pid: number): ProcessRef {
  return { pid, startTime: readProcStat(pid)?.startTime ?? null };
}

/**
 * Is this very process still there? A zombie counts as gone (it holds no resources and only waits
 * to be reaped by whoever adopted it); a pid now owned by another process counts as gone.
 */
export function isAlive(ref: ProcessRef): boolean {
  try {
    process.kill(ref.pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (!HAS_PROC) return true;
  const st = readProcStat(ref.pid);
  if (!st) return false;
  if (st.state === 'Z' || st.state === 'X') return false;
  return ref.startTime === null || st.startTime === ref.startTime;
}

/**
 * Signal the process only if it is still the one we recorded. Returns whether a signal was sent.
 * With `group`, a process that leads its own process group (agentctl starts every agent so) is
 * signalled with its whole group: what the agent started goes with it.
 */
export function signalProcess(ref: ProcessRef, signal: NodeJS.Signals, opts: { group?: boolean } = {}): boolean {
  if (!isAlive(ref)) return false;
  const leadsGroup = opts.group === true && HAS_PROC && readProcStat(ref.pid)?.pgid === ref.pid;
  try {
    process.kill(leadsGroup ? -ref.pid : ref.pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** Live children of a process (an agent agentctl spawned before it could tell us its pid). */
export function childProcesses(ppid: number): ProcessRef[] {
  if (!HAS_PROC) return [];
  const out: ProcessRef[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const st = readProcStat(Number(name));
    if (st && st.ppid === ppid && st.state !== 'Z') out.push({ pid: Number(name), startTime: st.startTime });
  }
  return out;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
