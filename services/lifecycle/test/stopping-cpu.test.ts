import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AUTOGROUPS, CPU_CGROUP, cpuCgroupOf, onHost, TEST_CPU_CGROUP } from '../../../vitest.host.js';
import { STOPPING_GROUP, StoppingCpu } from '../src/isolation/stopping-cpu.js';
import { eventually, log } from './helpers.js';

// Where the cpu cgroup is found (v1, v2, a container's namespace) is the host module's, tested
// over mountinfo texts with it (packages/runtime/test/host/cgroup.test.ts).

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

  onHost(CPU_CGROUP)('moves stopping processes into one group at the default weight, where the host lets this process make it', async () => {
    const own = TEST_CPU_CGROUP!;
    const ranking = StoppingCpu.open({ nice: 10, log });
    expect(ranking.mode).toBe('cgroup');
    const weight = own.version === 1 ? 'cpu.shares' : 'cpu.weight';
    expect(readFileSync(join(own.dir, STOPPING_GROUP, weight), 'utf8').trim()).toBe(own.version === 1 ? '1024' : '100');
    const [a, b] = [sleeper(), sleeper()];
    expect(cpuCgroupOf(a)).toBe(own.path);
    ranking.lower([a, b, 2 ** 22 + 7]); // the last one is no process: ignored
    const group = join(own.path, STOPPING_GROUP);
    await eventually(
      () => [cpuCgroupOf(a), cpuCgroupOf(b)],
      (g) => g.every((x) => x === group),
      5_000,
    );
  });

  /** A StoppingCpu opened where no cpu cgroup is mounted (a /proc/self stand-in that says so). */
  const withoutCgroup = (): StoppingCpu => {
    const procSelf = mkdtempSync(join(tmpdir(), 'kandev-procself-'));
    dirs.push(procSelf);
    writeFileSync(join(procSelf, 'mountinfo'), '22 1 8:1 / / rw - ext4 /dev/sda1 rw\n');
    writeFileSync(join(procSelf, 'cgroup'), '0::/\n');
    return StoppingCpu.open({ nice: 10, log, procSelf });
  };

  it('without a cpu cgroup it falls back to the sessions (autogroups, ADR 0043)', () => {
    expect(withoutCgroup().mode).toBe('autogroup');
  });

  onHost(AUTOGROUPS)("without a cpu cgroup it lowers each session's autogroup", async () => {
    const ranking = withoutCgroup();
    const pid = sleeper();
    ranking.lower([pid]);
    await eventually(
      () => /nice (-?\d+)/.exec(readFileSync(`/proc/${pid}/autogroup`, 'utf8'))?.[1],
      (n) => n === '10',
      5_000,
    );
  });
});
