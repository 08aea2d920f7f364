import { existsSync, readFileSync } from 'node:fs';

/**
 * Whether lifecycle, run by this test process, can make the stopping cpu group (ADR 0046): root,
 * with the cgroup v1 cpu hierarchy at its usual place, as on this project's CI machines. Told
 * independently of the code under test, so a detection that broke would fail the tests that use this.
 */
export function hostHasCpuCgroup(): boolean {
  return process.getuid?.() === 0 && existsSync('/sys/fs/cgroup/cpu/cpu.shares') && existsSync('/sys/fs/cgroup/cpu/cgroup.procs');
}

/** A process's cgroup in the hierarchy that carries the cpu controller (v1), from /proc/<pid>/cgroup. */
export function cpuCgroupOf(pid: number): string | undefined {
  return readFileSync(`/proc/${pid}/cgroup`, 'utf8')
    .split('\n')
    .find((l) => l.split(':')[1]?.split(',').includes('cpu'))
    ?.split(':')[2];
}
