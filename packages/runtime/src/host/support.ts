import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { findCpuCgroup, type CpuCgroup } from './cgroup.js';
import { Cap, holdsCaps, parseCapEff } from './parse.js';

/*
 * What this host offers the code that ranks, watches and isolates processes, found once. Each
 * caller still copes with a feature that goes away under it (a write refused, a process gone);
 * this is what it may plan on, and what the services, `npm start` and the tests report.
 */

export interface HostSupport {
  /** /proc with a stat file per process (Linux): process trees, liveness by start time, uids. */
  proc: boolean;
  /** /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN): a tree is walked without a scan of every process. */
  procChildren: boolean;
  /** Session autogroups (CONFIG_SCHED_AUTOGROUP, enabled): a session's weight is its autogroup's nice, not a process's. */
  autogroups: boolean;
  /**
   * This process's cpu cgroup, v1 or v2, and whether its directory is writable by this process (a
   * child group may be made there; v2 may still refuse to enable the cpu controller for it), or
   * why there is none.
   */
  cpuCgroup: (CpuCgroup & { writable: boolean }) | { version: null; reason: string };
  /** The effective uid; null on a platform without uids. */
  euid: number | null;
  /** Effective capabilities; null where /proc does not say. */
  capEff: bigint | null;
  /** Whether this process can start a child under another uid and gid (CAP_SETUID and CAP_SETGID). */
  canSwitchUids: boolean;
}

/** Where the probe looks: the real /proc, or a directory laid out like it (tests). */
export interface ProbeRoots {
  proc: string;
  euid: number | null;
}

/** The host as seen through `roots` (each call looks again; `hostSupport()` is the one-time answer). */
export function probeHost(roots: ProbeRoots = { proc: '/proc', euid: typeof process.geteuid === 'function' ? process.geteuid() : null }): HostSupport {
  const self = join(roots.proc, 'self');
  const proc = existsSync(join(self, 'stat'));
  const status = read(join(self, 'status'));
  const capEff = status === null ? null : parseCapEff(status);
  return {
    proc,
    procChildren: proc && existsSync(join(self, 'task', String(threadOfSelf(self)), 'children')),
    autogroups: existsSync(join(self, 'autogroup')) && read(join(roots.proc, 'sys/kernel/sched_autogroup_enabled'))?.trim() === '1',
    cpuCgroup: cpuCgroupOf(read(join(self, 'mountinfo')), read(join(self, 'cgroup'))),
    euid: roots.euid,
    capEff,
    canSwitchUids: holdsCaps(capEff, [Cap.SETUID, Cap.SETGID]),
  };
}

/** The leader thread's id as /proc/self names it (its pid: `self` is a link to it). */
function threadOfSelf(self: string): string {
  return read(join(self, 'stat'))?.split(' ', 1)[0] ?? String(process.pid);
}

function read(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

function cpuCgroupOf(mountinfo: string | null, cgroupFile: string | null): HostSupport['cpuCgroup'] {
  if (mountinfo === null || cgroupFile === null) return { version: null, reason: 'no /proc/self/mountinfo or /proc/self/cgroup' };
  const found = findCpuCgroup(mountinfo, cgroupFile);
  if ('reason' in found) return { version: null, reason: found.reason };
  return { ...found, writable: writable(found.dir) };
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

let probed: HostSupport | undefined;

/** The host, probed on first use and remembered for this process's life. */
export function hostSupport(): HostSupport {
  probed ??= probeHost();
  return probed;
}

/** One line for a log or a test run: what the host has and lacks. */
export function describeHost(h: HostSupport): string {
  const cg =
    h.cpuCgroup.version === null
      ? `no cpu cgroup (${h.cpuCgroup.reason})`
      : `cpu cgroup v${h.cpuCgroup.version} at ${h.cpuCgroup.dir}${h.cpuCgroup.writable ? '' : ' (read-only)'}`;
  return [
    h.proc ? '/proc' : 'no /proc',
    h.procChildren ? 'children files' : 'no children files',
    h.autogroups ? 'autogroups' : 'no autogroups',
    cg,
    h.euid === null ? 'no uids' : `euid ${h.euid}`,
    h.canSwitchUids ? 'may switch uids' : 'may not switch uids',
  ].join(', ');
}
