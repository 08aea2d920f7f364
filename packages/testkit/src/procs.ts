// Process bookkeeping for tests that must prove nothing was left running: a process is identified
// by (pid, start time), which survives pid reuse. The /proc reading is the host module's.
import { hasEnded, listPids, readCmdline, readProcStat } from '@kandev/runtime/host';

export interface Proc {
  pid: number;
  start: string;
  cmd: string;
}

/** (state, ppid, start time) of a process (a zombie's too), or null when it is gone. */
export function procStat(pid: number): { state: string; ppid: number; start: string } | null {
  const st = readProcStat(pid);
  return st ? { state: st.state, ppid: st.ppid, start: st.startTime } : null;
}

export const cmdline = readCmdline;

/** Every process below `root`, found by walking ppid chains over /proc. */
export function descendants(root: number): Proc[] {
  const children = new Map<number, number[]>();
  for (const pid of listPids()) {
    const st = readProcStat(pid);
    if (st) children.set(st.ppid, [...(children.get(st.ppid) ?? []), pid]);
  }
  const out: Proc[] = [];
  const queue = [root];
  while (queue.length) {
    for (const pid of children.get(queue.shift()!) ?? []) {
      const st = readProcStat(pid);
      if (st) out.push({ pid, start: st.startTime, cmd: readCmdline(pid) });
      queue.push(pid);
    }
  }
  return out;
}

/** The very process recorded in `p` still runs (a zombie counts as gone). */
export const procAlive = (p: Pick<Proc, 'pid' | 'start'>): boolean => {
  const st = readProcStat(p.pid);
  return st !== undefined && st.startTime === p.start && !hasEnded(st.state);
};

/** Every live process whose command line matches, anywhere on the machine. */
export function processesMatching(re: RegExp): Proc[] {
  const out: Proc[] = [];
  for (const pid of listPids()) {
    const cmd = readCmdline(pid);
    const st = readProcStat(pid);
    if (st && !hasEnded(st.state) && re.test(cmd)) out.push({ pid, start: st.startTime, cmd });
  }
  return out;
}

/** The host module's process readers, for the test workspaces that depend on the test kit alone. */
export { hasEnded, listPids, readCmdline, readProcStat } from '@kandev/runtime/host';
