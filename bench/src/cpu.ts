import { listPids, machineBusyTicks, readCmdline, readProcStat, threadsCpuNs } from '@kandev/runtime/host';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';

/**
 * CPU time from /proc, to say where a burst's time went when both cores are busy: the machine's
 * total (every process, the kernel included, from /proc/stat) and each live process's, grouped by
 * what it is. A process that exits inside the window takes its time with it (only the machine
 * total keeps it): the agents and agentctls a burst of stops tears down.
 */

/** Clock ticks per second of /proc times (USER_HZ: 100 on Linux, whatever the kernel's HZ). */
const TICK_MS = 10;
export const CORES = cpus().length;

export interface CpuSnapshot {
  at: number;
  machineBusyMs: number;
  processes: Map<string, { kind: string; ms: number }>;
}

/** This checkout: services, agentctls and agents of another checkout on the machine (another engineer's tests) are `other`. */
const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** What a process is, from its command line. */
function kindOf(pid: number): string {
  const cmd = readCmdline(pid);
  if (pid === process.pid) return 'bench';
  if (/services\/|agentctl|testkit\/dist\/agents/.test(cmd) && !cmd.includes(REPO_ROOT)) return 'other';
  // tsc's entry or the bundle the stacks run (ADR 0052).
  const service = /services\/([a-z-]+)\/dist\/(?:main|[a-z-]+\.bundle)\.js/.exec(cmd);
  if (service) return service[1]!;
  if (/agentctl\/dist\/(?:main|agentctl\.bundle)\.js/.test(cmd)) return 'agentctl';
  if (cmd.includes('testkit/dist/agents')) return 'agent';
  if (cmd.includes('nats-server')) return 'nats-server';
  if (cmd.startsWith('postgres')) return 'postgres';
  return 'other';
}

export function cpuSnapshot(): CpuSnapshot {
  const machineBusyMs = machineBusyTicks() * TICK_MS;
  const processes = new Map<string, { kind: string; ms: number }>();
  for (const pid of listPids()) {
    const stat = readProcStat(pid);
    if (!stat) continue;
    const kind = kindOf(pid);
    processes.set(String(pid), { kind, ms: (stat.utime + stat.stime) * TICK_MS });
  }
  return { at: performance.now(), machineBusyMs, processes };
}

export interface CpuSpent {
  wallMs: number;
  machineMs: number;
  /** Share of all cores busy over the window, 0..1. */
  busyShare: number;
  /** CPU ms of processes alive at the end of the window, by kind (a process's time before the window excluded). */
  byKind: Record<string, number>;
}

export function cpuSpent(a: CpuSnapshot, b: CpuSnapshot): CpuSpent {
  const byKind: Record<string, number> = {};
  for (const [pid, p] of b.processes) {
    const before = a.processes.get(pid)?.ms ?? 0;
    byKind[p.kind] = (byKind[p.kind] ?? 0) + Math.max(0, p.ms - before);
  }
  const wallMs = b.at - a.at;
  const machineMs = b.machineBusyMs - a.machineBusyMs;
  return { wallMs, machineMs, busyShare: Math.min(1, machineMs / (wallMs * CORES)), byKind };
}

/**
 * Waits until the processes of `kinds` together use at most `maxShare` of one core, plus
 * `perProcessShare` for each of them, over one `windowMs` window, for at most `timeoutMs`; answers
 * how long that took, or null if they never settled. Agents that report ready keep starting for a
 * while after (module loading, compilation, their first prompt): on a slow machine that tail
 * outlasts any fixed pause, and a burst begun within it shares the cores with it (the "disturbed
 * bursts" of docs/history/fast-paths-rounds.md). The allowance per process is what an idle one still spends:
 * agentctl notes its agent's process tree every second, about 0.4% of a core, so fifty of them
 * alone were over a flat 5% and never "settled".
 */
export async function settled(
  kinds: readonly string[],
  opts: { windowMs?: number; maxShare?: number; perProcessShare?: number; timeoutMs?: number } = {},
): Promise<number | null> {
  const { windowMs = 500, maxShare = 0.05, perProcessShare = 0.005, timeoutMs = 20_000 } = opts;
  const start = performance.now();
  while (performance.now() - start < timeoutMs) {
    const a = cpuSnapshot();
    await new Promise((r) => setTimeout(r, windowMs));
    const b = cpuSnapshot();
    const spent = cpuSpent(a, b);
    const ms = kinds.reduce((sum, k) => sum + (spent.byKind[k] ?? 0), 0);
    const processes = [...b.processes.values()].filter((p) => kinds.includes(p.kind)).length;
    if (ms <= (maxShare + perProcessShare * processes) * spent.wallMs) return performance.now() - start;
  }
  return null;
}

/**
 * CPU ms a live process has used so far, from its threads' schedstat (nanoseconds); 0 when it is
 * gone. Not utime + stime of /proc/<pid>/stat: those are 10 ms ticks, each rounded down, so what
 * 200 processes had used before the request read about 2 s short, and that much of their earlier
 * life was counted as teardown (the reaped time a parent gets is exact). The tree curve and
 * bench/teardown-cpu.mjs take what their pairs had used before a stop from it.
 */
export function liveCpuMs(pid: number): number {
  return threadsCpuNs(pid) / 1e6;
}
