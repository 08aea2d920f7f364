// Process bookkeeping over /proc (Linux) for tests that must prove nothing was left running: a
// process is identified by (pid, start time), which survives pid reuse.
import { readFileSync, readdirSync } from 'node:fs';

export interface Proc {
  pid: number;
  start: string;
  cmd: string;
}

/** (state, ppid, start time) from /proc/<pid>/stat; the comm field may hold spaces and parens. */
export function procStat(pid: number): { state: string; ppid: number; start: string } | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { state: rest[0]!, ppid: Number(rest[1]), start: rest[19]! };
  } catch {
    return null;
  }
}

export function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    return '';
  }
}

/** Every process below `root`, found by walking ppid chains over /proc. */
export function descendants(root: number): Proc[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const st = procStat(Number(name));
    if (!st) continue;
    children.set(st.ppid, [...(children.get(st.ppid) ?? []), Number(name)]);
  }
  const out: Proc[] = [];
  const queue = [root];
  while (queue.length) {
    for (const pid of children.get(queue.shift()!) ?? []) {
      const st = procStat(pid);
      if (st) out.push({ pid, start: st.start, cmd: cmdline(pid) });
      queue.push(pid);
    }
  }
  return out;
}

/** The very process recorded in `p` still runs (a zombie counts as gone). */
export const procAlive = (p: Pick<Proc, 'pid' | 'start'>): boolean => {
  const st = procStat(p.pid);
  return st !== null && st.start === p.start && st.state !== 'Z';
};

/** Every live process whose command line matches, anywhere on the machine. */
export function processesMatching(re: RegExp): Proc[] {
  const out: Proc[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const cmd = cmdline(Number(name));
    const st = procStat(Number(name));
    if (st && st.state !== 'Z' && re.test(cmd)) out.push({ pid: Number(name), start: st.start, cmd });
  }
  return out;
}
