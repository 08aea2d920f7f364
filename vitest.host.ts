import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { afterAll, it } from 'vitest';

/*
 * Tests that need a feature of the host (root, autogroups, a cpu cgroup this process may write):
 * where it exists they run; where it does not they are excluded by name, with what the host lacks,
 * and the run prints each excluded test's name and reason at the end of its file's output — never a test that returns early
 * and passes. KANDEV_REQUIRE_HOST=<feature,…> (or `all`) turns an exclusion into a failure that
 * says what is missing: for the machines that are meant to have the feature (CI runs as root on a
 * kernel with autogroups and a writable cpu cgroup).
 */

export interface HostRequirement {
  /** What the test needs, as a short name (`autogroups`, `cpu-cgroup`, `root`). */
  feature: string;
  /** Whether this host has it. */
  present: boolean;
  /** What the host has instead, for the message. */
  lacking: string;
}

const required = new Set((process.env.KANDEV_REQUIRE_HOST ?? '').split(',').map((s) => s.trim()));

/**
 * `it`, for a test that needs `req`: the test itself where the host has it; otherwise a skipped test
 * named with what is missing (printed in the file's list), or, where KANDEV_REQUIRE_HOST names the
 * feature, a test that fails saying so.
 */
export function onHost(req: HostRequirement): (name: string, fn: () => Promise<void> | void, timeout?: number) => void {
  return (name, fn, timeout) => {
    if (req.present) return void it(name, fn, timeout);
    const why = `needs ${req.feature}: ${req.lacking}`;
    if (required.has(req.feature) || required.has('all'))
      return void it(name, () => {
        throw new Error(`this host lacks what the test needs (KANDEV_REQUIRE_HOST names it): ${why}`);
      });
    // Said once the file's tests have run, so the list stands at the end of its output.
    afterAll(() => void process.stderr.write(`[host] excluded here (KANDEV_REQUIRE_HOST=${req.feature} makes it fail): ${name} (${why})\n`));
    it.skip(`${name} [${why}]`, fn);
  };
}

/*
 * The features, told here from the files the kernel shows, independently of the host module
 * (@kandev/runtime/host) whose detection they check: a probe that broke would then fail the tests
 * that compare with these, not exclude them.
 */

const readOr = (path: string): string | null => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
};

/** This test process runs as root (agents get uids of their own, cgroups may be written). */
export const ROOT: HostRequirement = {
  feature: 'root',
  present: process.getuid?.() === 0,
  lacking: `running as uid ${process.getuid?.() ?? 'none'}`,
};

/** Session autogroups: /proc/<pid>/autogroup, enabled by sched_autogroup_enabled. */
export const AUTOGROUPS: HostRequirement = (() => {
  const file = existsSync('/proc/self/autogroup');
  const enabled = readOr('/proc/sys/kernel/sched_autogroup_enabled')?.trim() === '1';
  return {
    feature: 'autogroups',
    present: file && enabled,
    lacking: !file ? 'a kernel without CONFIG_SCHED_AUTOGROUP (no /proc/self/autogroup)' : 'autogroups turned off (kernel.sched_autogroup_enabled=0)',
  };
})();

/** This process's cpu cgroup in the usual places: v1 under /sys/fs/cgroup/cpu, v2 with /sys/fs/cgroup the cgroup2 mount. */
export interface TestCpuCgroup {
  version: 1 | 2;
  /** The process's path in the hierarchy (`/` at its root). */
  path: string;
  /** That path's directory. */
  dir: string;
}

function ownCpuCgroup(): TestCpuCgroup | { lacking: string } {
  const lines = (readOr('/proc/self/cgroup') ?? '').split('\n');
  const v1 = lines.find((l) => l.split(':')[1]?.split(',').includes('cpu'));
  if (v1 !== undefined && existsSync('/sys/fs/cgroup/cpu/cpu.shares')) {
    const path = v1.split(':').slice(2).join(':');
    return { version: 1, path, dir: `/sys/fs/cgroup/cpu${path === '/' ? '' : path}` };
  }
  const v2 = lines.find((l) => l.startsWith('0::'));
  if (v2 !== undefined && existsSync('/sys/fs/cgroup/cgroup.controllers')) {
    const path = v2.slice(3);
    const dir = `/sys/fs/cgroup${path === '/' ? '' : path}`;
    if (!(readOr(`${dir}/cgroup.controllers`) ?? '').split(/\s+/).includes('cpu'))
      return { lacking: `cgroup v2, but ${dir} has no cpu controller to give a child` };
    // A v2 group that holds processes may not enable a controller for children (the root may).
    if (path !== '/' && !(readOr(`${dir}/cgroup.subtree_control`) ?? '').split(/\s+/).includes('cpu'))
      return { lacking: `cgroup v2, but ${dir} holds this process and does not share its cpu controller with children` };
    return { version: 2, path, dir };
  }
  return { lacking: 'neither a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu nor cgroup v2 at /sys/fs/cgroup' };
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

const cpuCgroup = ownCpuCgroup();

/** This process's cpu cgroup where the stopping group can be made under it (root, a writable v1 or v2 hierarchy); else null. */
export const TEST_CPU_CGROUP: TestCpuCgroup | null = 'version' in cpuCgroup && ROOT.present && writable(cpuCgroup.dir) ? cpuCgroup : null;

/** A cpu cgroup the lifecycle, run by this process, can make its stopping group in (ADR 0046). */
export const CPU_CGROUP: HostRequirement = {
  feature: 'cpu-cgroup',
  present: TEST_CPU_CGROUP !== null,
  lacking:
    'lacking' in cpuCgroup ? cpuCgroup.lacking : !ROOT.present ? `${cpuCgroup.dir} is root's to write (${ROOT.lacking})` : `${cpuCgroup.dir} is read-only`,
};

/** A process's path in the hierarchy carrying the cpu controller: the v1 `cpu` line, else v2's `0::` line. */
export function cpuCgroupOf(pid: number): string | undefined {
  const lines = (readOr(`/proc/${pid}/cgroup`) ?? '').split('\n');
  const line = lines.find((l) => l.split(':')[1]?.split(',').includes('cpu')) ?? lines.find((l) => l.startsWith('0::'));
  return line?.split(':').slice(2).join(':');
}
