import { existsSync, readdirSync, readFileSync } from 'node:fs';

/*
 * Processes as /proc shows them: who is still there, and an agent's whole tree. A process group
 * alone does not hold an agent's tree: Codex runs shell commands in a pseudo-terminal of their own
 * (setsid, so a new session and group), and a grandchild outlives its parent by being re-parented
 * to init. So agentctl notes the whole tree before it signals, and signals every group in it
 * (terminate.ts). The lifecycle service identifies agentctl and agents the same way.
 */

/**
 * A process as we learnt it: the pid together with its start time, so a recycled pid is never
 * taken for it.
 */
export interface ProcessRef {
  pid: number;
  /** Field 22 of /proc/<pid>/stat (clock ticks since boot); null where /proc is unavailable. */
  startTime: string | null;
}

export interface TreeProcess extends ProcessRef {
  pgid: number;
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

/**
 * Children of one process: each thread's own children file (a child belongs to the thread that
 * forked it, and Codex forks from worker threads); undefined if the kernel lacks the file.
 *
 * A thread other than the leader is read as /proc/<tid>/task/<tid>/children, not under
 * /proc/<pid>/task/<tid>. Same file, but the dentries the kernel caches for the path read stay
 * under /proc/<pid> in the second form, and reaping the process invalidates that whole subtree:
 * read there, a hundred agents reaped at once cost their agentctls about 6 ms of kernel time each
 * (d_walk in wait4), a third of their CPU in a tree pause, against nothing measurable in the first
 * form (bench/TREE-CURVE.md, "Reaping and /proc").
 */
function childrenOf(pid: number): number[] | undefined {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? [] : undefined; // the process is gone
  }
  const out: number[] = [];
  for (const tid of tids) {
    let raw: string;
    try {
      raw = readFileSync(tid === String(pid) ? `/proc/${pid}/task/${pid}/children` : `/proc/${tid}/task/${tid}/children`, 'utf8').trim();
    } catch (err) {
      // ENOENT: this thread ended since the listing (its children, if any, went to another);
      // anything else: the kernel lacks the file.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      return undefined;
    }
    if (raw) for (const c of raw.split(' ')) out.push(Number(c));
  }
  return out;
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

/** Every live process on the machine (the fallback where the kernel lacks the children files). */
function scanProc(): ProcStat[] {
  const all: ProcStat[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const st = readProcStat(Number(name));
    if (st && st.state !== 'Z' && st.state !== 'X') all.push(st);
  }
  return all;
}

function scanTree(root: number): TreeProcess[] {
  const all = scanProc();
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

/**
 * Live processes in any of these process groups, from a scan of /proc. A process forked after the
 * tree was last walked, whose parent then died, is nobody's descendant any more (re-parented to
 * init), but it is still in its parent's group. A caller passes only groups it saw live moments
 * ago: a group id is a pid, and pids are recycled.
 */
export function processesInGroups(pgids: ReadonlySet<number>): TreeProcess[] {
  if (!HAS_PROC || pgids.size === 0) return [];
  return scanProc()
    .filter((st) => pgids.has(st.pgid))
    .map((st) => ({ pid: st.pid, pgid: st.pgid, startTime: st.startTime }));
}

/** A handle on a process that is there now (its start time read from /proc where there is one). */
export function processRef(pid: number): ProcessRef {
  return { pid, startTime: readProcStat(pid)?.startTime ?? null };
}

/**
 * Is this very process still there? A zombie counts as gone (it holds nothing and only waits to be
 * reaped); a pid now owned by another process (other start time) counts as gone.
 */
export function isAlive(ref: ProcessRef): boolean {
  try {
    process.kill(ref.pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (!HAS_PROC) return true;
  return liveStat(ref) !== undefined;
}

/** The process's stat while it is still the process we noted (not a zombie, not a recycled pid). */
export function liveStat(ref: ProcessRef): ProcStat | undefined {
  const st = readProcStat(ref.pid);
  if (!st || st.state === 'Z' || st.state === 'X') return undefined;
  return ref.startTime === null || st.startTime === ref.startTime ? st : undefined;
}

/** Live children of a process (an agent agentctl spawned before it could tell us its pid). */
export function childProcesses(ppid: number): TreeProcess[] {
  if (!HAS_PROC) return [];
  const children = childrenOf(ppid);
  const stats = children === undefined ? scanProc().filter((st) => st.ppid === ppid) : children.map(readProcStat).filter((st) => st !== undefined);
  return stats.filter((st) => st.ppid === ppid && st.state !== 'Z' && st.state !== 'X').map((st) => ({ pid: st.pid, pgid: st.pgid, startTime: st.startTime }));
}

/** Merges a fresh look at the tree into what was noted before (processes re-parented away stay on the list). */
export function mergeTrees(a: readonly TreeProcess[], b: readonly TreeProcess[]): TreeProcess[] {
  const seen = new Map<string, TreeProcess>();
  for (const p of [...a, ...b]) seen.set(`${p.pid}:${p.startTime}`, p);
  return [...seen.values()];
}
