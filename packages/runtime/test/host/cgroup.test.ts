import { describe, expect, it } from 'vitest';
import { findCpuCgroup, parseCgroupFile } from '../../src/host/cgroup.js';

/* Where this process's cpu cgroup is, v1 and v2, from mountinfo and cgroup texts (the host module's plain rules). */

const V1_MOUNTS = [
  '30 24 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu',
  '31 24 0:27 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct',
  '40 24 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
].join('\n');

describe('findCpuCgroup', () => {
  it('v1: the mount carrying the cpu controller, and our path in that hierarchy', () => {
    expect(findCpuCgroup(V1_MOUNTS, '4:memory:/x\n1:cpu:/\n0::/\n')).toEqual({ version: 1, dir: '/sys/fs/cgroup/cpu' });
    expect(findCpuCgroup(V1_MOUNTS.replace('rw,cpu\n', 'rw,cpu,cpuacct\n'), '2:cpu,cpuacct:/kubepods/pod1/c1\n')).toEqual({
      version: 1,
      dir: '/sys/fs/cgroup/cpu/kubepods/pod1/c1',
    });
  });

  it("paths are relative to the mount's own root (a container's namespace), and mountinfo's escapes are undone", () => {
    const mounts = '30 24 0:26 /docker/abc /sys/fs/cgroup/cpu\\040x rw - cgroup cgroup rw,cpu';
    expect(findCpuCgroup(mounts, '1:cpu:/docker/abc/inner\n')).toEqual({ version: 1, dir: '/sys/fs/cgroup/cpu x/inner' });
  });

  it('v2 where no v1 hierarchy has the cpu controller; none where neither is mounted', () => {
    const v2 = '40 24 0:36 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw';
    expect(findCpuCgroup(v2, '0::/system.slice/kandev.service\n')).toEqual({ version: 2, dir: '/sys/fs/cgroup/system.slice/kandev.service' });
    expect(findCpuCgroup(v2, '0::/\n')).toEqual({ version: 2, dir: '/sys/fs/cgroup' });
    expect(findCpuCgroup('22 1 8:1 / / rw - ext4 /dev/sda1 rw', '0::/\n')).toEqual({ reason: 'no cpu cgroup hierarchy is mounted' });
  });

  it("a hybrid host's v1 cpu hierarchy wins over its v2 mount (the cpu controller is v1's there)", () => {
    expect(findCpuCgroup(V1_MOUNTS, '1:cpu:/a\n0::/b\n')).toEqual({ version: 1, dir: '/sys/fs/cgroup/cpu/a' });
  });
});

describe('/proc/<pid>/cgroup', () => {
  it('entries with their controllers; v2 has none; a path may hold colons', () => {
    expect(parseCgroupFile('2:cpu,cpuacct:/a\n0::/b:c\n')).toEqual([
      { controllers: ['cpu', 'cpuacct'], path: '/a' },
      { controllers: [], path: '/b:c' },
    ]);
  });
});
