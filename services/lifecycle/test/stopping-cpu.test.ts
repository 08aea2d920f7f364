import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { findCpuCgroup } from '../src/domain/cpu-cgroup.js';
import { STOPPING_GROUP, StoppingCpu } from '../src/isolation/stopping-cpu.js';
import { eventually, log } from './helpers.js';
import { cpuCgroupOf, hostHasCpuCgroup } from './host.js';

const V1_MOUNTS = [
  '30 24 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu',
  '31 24 0:27 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct',
  '40 24 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
].join('\n');

describe('where the cpu cgroup is (domain)', () => {
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
});

describe('the stopping cpu group (a real kernel)', () => {
  const children: ChildProcess[] = [];
  const dirs: string[] = [];
  afterEach(() => {
    for (const c of children.splice(0)) c.kill('SIGKILL');
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  /** A process in a session of its own, as agentctl and agents are: lowering its autogroup leaves ours alone. */
  const sleeper = (): number => {
    const c = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
    children.push(c);
    return c.pid!;
  };

  it('AGENT_NICE=0 ranks nothing', () => {
    expect(StoppingCpu.open({ nice: 0, log }).mode).toBe('off');
  });

  it('moves stopping processes into one group at the default weight, where the host lets this process make it', async () => {
    const ranking = StoppingCpu.open({ nice: 10, log });
    if (!hostHasCpuCgroup()) {
      expect(ranking.mode).toBe('autogroup');
      return;
    }
    expect(ranking.mode).toBe('cgroup');
    expect(readFileSync(`/sys/fs/cgroup/cpu/${STOPPING_GROUP}/cpu.shares`, 'utf8').trim()).toBe('1024');
    const [a, b] = [sleeper(), sleeper()];
    expect(cpuCgroupOf(a)).toBe('/');
    ranking.lower([a, b, 2 ** 22 + 7]); // the last one is no process: ignored
    await eventually(
      () => [cpuCgroupOf(a), cpuCgroupOf(b)],
      (g) => g.every((x) => x === `/${STOPPING_GROUP}`),
      5_000,
    );
  });

  it('without a cpu cgroup it lowers each session instead (autogroups, ADR 0043)', async () => {
    const procSelf = mkdtempSync(join(tmpdir(), 'kandev-procself-'));
    dirs.push(procSelf);
    writeFileSync(join(procSelf, 'mountinfo'), '22 1 8:1 / / rw - ext4 /dev/sda1 rw\n');
    writeFileSync(join(procSelf, 'cgroup'), '0::/\n');
    const ranking = StoppingCpu.open({ nice: 10, log, procSelf });
    expect(ranking.mode).toBe('autogroup');
    const pid = sleeper();
    if (!existsSync(`/proc/${pid}/autogroup`)) return; // a kernel without autogroups: a nice value is all there is
    ranking.lower([pid]);
    await eventually(
      () => /nice (-?\d+)/.exec(readFileSync(`/proc/${pid}/autogroup`, 'utf8'))?.[1],
      (n) => n === '10',
      5_000,
    );
  });
});
