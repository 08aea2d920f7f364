import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { hasEnded, parseChildren, parseCmdline, parseMachineBusyTicks, parseProcStat, parseSchedstatNs, type ProcStat } from './parse.js';

/*
 * Processes as /proc shows them: who is still there, and an agent's whole tree. A process group
 * alone does not hold an agent's tree: Codex runs shell commands in a pseudo-terminal of their own
 * (setsid, so a new session and group), and a grandchild outlives its parent by being re-parented
 * to init. So agentctl notes the whole tree before it signals, and signals every group in it
 * (terminate.ts). The lifecycle service identifies agentctl and agents the same way, and the test
 * kit, scripts and benchmarks read processes through here too.
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

export type { ProcStat } from './parse.js';

/** One process's /proc/<pid>/stat, or undefined when it is gone or unreadable. */
export function readProcStat(pid: number): ProcStat | undefined {
  try {
    return parseProcStat(pid, readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/** A process's command line (its arguments joined by spaces); empty when it is gone or has none (a kernel thread). */
export function readCmdline(pid: number): string {
  try {
    return parseCmdline(readFileSync(`/proc/${pid}/cmdline`, 'utf8'));
  } catch {
    return '';
  }
}

/** The pids /proc lists now (empty without /proc). */
export function listPids(): number[] {
  try {
    return readdirSync('/proc')
      .filter((n) => /^\d+$/.test(n))
      .map(Number);
  } catch {
    return [];
  }
}

/**
 * A thread's file under the path whose cached dentries its reaping leaves alone (see childrenOf):
 * the leader's as /proc/<pid>/task/<pid>/<file>, any other's as /proc/<tid>/task/<tid>/<file>.
 */
const threadFile = (pid: number, tid: string, file: string): string =>
  tid === String(pid) ? `/proc/${pid}/task/${pid}/${file}` : `/proc/${tid}/task/${tid}/${file}`;

/** Busy clock ticks of the whole machine so far, every process and the kernel (/proc/stat). */
export const machineBusyTicks = (): number => parseMachineBusyTicks(readFileSync('/proc/stat', 'utf8'));

/**
 * CPU time a live process has used so far, in nanoseconds, from its threads' schedstat (exact, not
 * stat's 10 ms ticks); 0 when it is gone. A thread that ended meanwhile has its time in the
 * process's total at exit, which goes to its parent.
 */
export function threadsCpuNs(pid: number): number {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return 0;
  }
  let ns = 0;
  for (const tid of tids) {
    try {
      ns += parseSchedstatNs(readFileSync(threadFile(pid, tid, 'schedstat'), 'utf8'));
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return ns;
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
 * form (docs/history/tree-curve-runs.md, "Reaping and /proc").
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
      raw = readFileSync(threadFile(pid, tid, 'children'), 'utf8');
    } catch (err) {
      // ENOENT: this thread ended since the listing (its children, if any, went to another);
      // anything else: the kernel lacks the file.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      return undefined;
    }
    out.push(...parseChildren(raw));
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
  if (!rootStat || hasEnded(rootStat.state)) return [];
  const out: TreeProcess[] = [];
  const queue: number[] = [root];
  while (queue.length > 0) {
    const pid = queue.shift()!;
    const st = readProcStat(pid);
    if (!st || hasEnded(st.state)) continue;
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
  for (const pid of listPids()) {
    const st = readProcStat(pid);
    if (st && !hasEnded(st.state)) all.push(st);
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
  if (!st || hasEnded(st.state)) return undefined;
  return ref.startTime === null || st.startTime === ref.startTime ? st : undefined;
}

/** Live children of a process (an agent agentctl spawned before it could tell us its pid). */
export function childProcesses(ppid: number): TreeProcess[] {
  if (!HAS_PROC) return [];
  const children = childrenOf(ppid);
  const stats = children === undefined ? scanProc().filter((st) => st.ppid === ppid) : children.map(readProcStat).filter((st) => st !== undefined);
  return stats.filter((st) => st.ppid === ppid && !hasEnded(st.state)).map((st) => ({ pid: st.pid, pgid: st.pgid, startTime: st.startTime }));
}

/** Merges a fresh look at the tree into what was noted before (processes re-parented away stay on the list). */
export function mergeTrees(a: readonly TreeProcess[], b: readonly TreeProcess[]): TreeProcess[] {
  const seen = new Map<string, TreeProcess>();
  for (const p of [...a, ...b]) seen.set(`${p.pid}:${p.startTime}`, p);
  return [...seen.values()];
}
