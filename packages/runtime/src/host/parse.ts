/*
 * The text of /proc files, read as values: plain functions over strings, so each rule is tested
 * on the file as the kernel writes it (proc(5)), not on whatever the test machine happens to have.
 */

/** The fields of /proc/<pid>/stat that agentctl, the lifecycle, the test kit and the benchmarks read. */
export interface ProcStat {
  pid: number;
  ppid: number;
  pgid: number;
  /** The session id (field 6): a process leading its session has it equal to its pid. */
  session: number;
  /** One letter: R, S, D, Z (a zombie: exited, not reaped), X (dead), T, … */
  state: string;
  /** CPU time in clock ticks (fields 14–17): its own user and system time, and its reaped children's. */
  utime: number;
  stime: number;
  cutime: number;
  cstime: number;
  /** Field 22 (clock ticks since boot): tells this process from a later one with the same pid. */
  startTime: string;
}

/** /proc/<pid>/stat's text as its fields, or undefined when it is not such a text. */
export function parseProcStat(pid: number, text: string): ProcStat | undefined {
  // comm (field 2) may hold spaces and parentheses; the fields after the last ')' are fixed.
  const close = text.lastIndexOf(')');
  if (close < 0) return undefined;
  const rest = text.slice(close + 2).split(' ');
  const [state, ppid, pgid, session] = rest;
  const startTime = rest[19];
  if (!state || !ppid || !pgid || !session || !startTime) return undefined;
  const tick = (i: number): number => Number(rest[i] ?? 0);
  return {
    pid,
    ppid: Number(ppid),
    pgid: Number(pgid),
    session: Number(session),
    state,
    utime: tick(11),
    stime: tick(12),
    cutime: tick(13),
    cstime: tick(14),
    startTime,
  };
}

/** Whether a process in this state has ended (a zombie holds nothing and only waits for its parent's wait()). */
export const hasEnded = (state: string): boolean => state === 'Z' || state === 'X';

/** /proc/<pid>/task/<tid>/children: the pids, space-separated. */
export function parseChildren(text: string): number[] {
  const trimmed = text.trim();
  return trimmed ? trimmed.split(/\s+/).map(Number) : [];
}

/** /proc/<pid>/cmdline: arguments separated (and ended) by NUL, as one line. */
export const parseCmdline = (text: string): string => text.split('\0').join(' ').trim();

/** Every uid a /proc/<pid>/status names (real, effective, saved, filesystem); empty when it names none. */
export function statusUids(status: string): number[] {
  const m = /^Uid:\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$/m.exec(status);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])] : [];
}

/** Whether a /proc/<pid>/status is a zombie's. */
export const statusIsZombie = (status: string): boolean => /^State:\s*Z/m.test(status);

/** Capability bits of /proc/<pid>/status CapEff (linux/capability.h). */
export const Cap = { CHOWN: 0, DAC_OVERRIDE: 1, DAC_READ_SEARCH: 2, FOWNER: 3, KILL: 5, SETGID: 6, SETUID: 7, SYS_ADMIN: 21, SYS_NICE: 23 } as const;

/** CapEff of a /proc/<pid>/status text; null when absent. */
export function parseCapEff(status: string): bigint | null {
  const m = /^CapEff:\s*([0-9a-f]+)\s*$/im.exec(status);
  return m ? BigInt(`0x${m[1]}`) : null;
}

/** Whether a CapEff value holds every one of these capabilities. */
export const holdsCaps = (capEff: bigint | null, caps: readonly number[]): boolean => capEff !== null && caps.every((c) => (capEff >> BigInt(c)) & 1n);

/**
 * Busy clock ticks of the whole machine from /proc/stat's first line (`cpu user nice system idle
 * iowait irq softirq steal …`): everything but idle and iowait.
 */
export function parseMachineBusyTicks(procStat: string): number {
  const f = (procStat.split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  return [0, 1, 2, 5, 6, 7].reduce((sum, i) => sum + (f[i] ?? 0), 0);
}

/** The run time in nanoseconds of /proc/<pid>/task/<tid>/schedstat (`run wait timeslices`). */
export const parseSchedstatNs = (text: string): number => Number(text.split(' ', 1)[0]) || 0;
