import { existsSync, readdirSync, readFileSync } from 'node:fs';

/*
 * The agent's process tree as /proc shows it. A process group alone does not hold an agent's
 * tree: Codex runs shell commands in a pseudo-terminal of their own (setsid, so a new session and
 * group), and a grandchild outlives its parent by being re-parented to init. So agentctl notes the
 * whole tree before it signals, and signals every group in it.
 */

export interface TreeProcess {
  pid: number;
  pgid: number;
  /** Field 22 of /proc/<pid>/stat: tells this process from a later one with the same pid. */
  startTime: string;
}

/** Whether this system has /proc (Linux); without it nothing here can see processes. */
export const HAS_PROC = existsSync('/proc/self/stat');

/** The fields of /proc/<pid>/stat the process helpers of agentctl and lifecycle need. */
export interface ProcStat {
  pid: number;
  ppid: number;
  pgid: number;
  state: string;
  /** Field 22: tells this process from a later one with the same pid. */
  startTime: string;
}

/** One process's /proc/<pid>/stat, or undefined when it is gone or unreadable. */
export function readProcStat(pid: number): ProcStat | undefined {
  try {
    const raw = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // comm (field 2) may hold spaces and parentheses; the fields after the last ')' are fixed.
    const rest = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
    const [state, ppid, pgid] = rest;
    const startTime = rest[19];
    if (!state || !ppid || !pgid || !startTime) return undefined;
    return { pid, ppid: Number(ppid), pgid: Number(pgid), state, startTime };
  } catch {
    return undefined;
  }
}

/** Children of one process from /proc/<pid>/task/<tid>/children (one small read per thread); undefined if unsupported. */
function childrenOf(pid: number): number[] | undefined {
  try {
    const out: number[] = [];
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const raw = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      if (raw) for (const c of raw.split(' ')) out.push(Number(c));
    }
    return out;
  } catch (err) {
    // ENOENT: the process (or thread) is gone; anything else: the kernel lacks the file.
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? [] : undefined;
  }
}

/**
 * The process and all its live descendants (empty without /proc, or when it is gone). Walks the
 * tree through /proc/<pid>/task/<tid>/children, which costs reads in proportion to the tree, not
 * to every process on the machine; falls back to a scan of /proc where the kernel lacks that file.
 */
export function processTree(root: number): TreeProcess[] {
  if (!HAS_PROC) return [];
  const rootStat = readProcStat(root);
  if (!rootStat || rootStat.state === 'Z' || rootStat.state === 'X') return [];
  const out: TreeProcess[] = [];
  const queue: number[] = [root];
  while (queue.length > 0) {
    const pid = queue.shift()!;
    const st = readProcStat(pid);
    if (!st || st.state === 'Z' || st.state === 'X') continue;
    out.push({ pid: st.pid, pgid: st.pgid, startTime: st.startTime });
    const children = childrenOf(pid);
    if (children === undefined) return scanTree(root);
    queue.push(...children);
  }
  return out;
}

function scanTree(root: number): TreeProcess[] {
  const all: ProcStat[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const st = readProcStat(Number(name));
    if (st && st.state !== 'Z' && st.state !== 'X') all.push(st);
  }
  const byParent = new Map<number, ProcStat[]>();
  for (const st of all) byParent.set(st.ppid, [...(byParent.get(st.ppid) ?? []), st]);
  const rootStat = all.find((s) => s.pid === root);
  if (!rootStat) return [];
  const out: TreeProcess[] = [];
  const queue: ProcStat[] = [rootStat];
  while (queue.length > 0) {
    const st = queue.shift()!;
    out.push({ pid: st.pid, pgid: st.pgid, startTime: st.startTime });
    queue.push(...(byParent.get(st.pid) ?? []));
  }
  return out;
}

/** Still the very process we noted (not a zombie, not a recycled pid)? */
export function stillRunning(p: TreeProcess): boolean {
  const st = readProcStat(p.pid);
  return st !== undefined && st.state !== 'Z' && st.state !== 'X' && st.startTime === p.startTime;
}

/**
 * Signals every process group of the tree (the agent's own first) and every member that is still
 * the process we noted. Never agentctl's own group. Returns how many processes were signalled.
 */
export function signalTree(tree: readonly TreeProcess[], signal: NodeJS.Signals): number {
  const own = readProcStat(process.pid)?.pgid ?? process.pid;
  let signalled = 0;
  const groups = new Set<number>();
  for (const p of tree) {
    if (p.pgid === own || p.pgid <= 1 || groups.has(p.pgid)) continue;
    // A group is signalled only while one of its members we noted is still that process.
    if (!tree.some((q) => q.pgid === p.pgid && stillRunning(q))) continue;
    groups.add(p.pgid);
    try {
      process.kill(-p.pgid, signal);
    } catch {
      // the group emptied meanwhile
    }
  }
  for (const p of tree) {
    if (p.pid === process.pid || !stillRunning(p)) continue;
    try {
      process.kill(p.pid, signal);
      signalled++;
    } catch {
      // gone meanwhile
    }
  }
  return signalled;
}

/** Merges a fresh look at the tree into what was noted before (processes re-parented away stay on the list). */
export function mergeTrees(a: readonly TreeProcess[], b: readonly TreeProcess[]): TreeProcess[] {
  const seen = new Map<string, TreeProcess>();
  for (const p of [...a, ...b]) seen.set(`${p.pid}:${p.startTime}`, p);
  return [...seen.values()];
}
