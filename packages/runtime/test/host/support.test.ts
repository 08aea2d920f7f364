import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { AUTOGROUPS, ROOT, TEST_CPU_CGROUP } from '../../../../vitest.host.js';
import { describeHost, hostSupport, probeHost } from '../../src/host/support.js';

/*
 * The typed description of the host (support.ts): over directories laid out like /proc, one per
 * kind of host, and on this machine against what the test helpers tell independently.
 */

const roots: string[] = [];
afterAll(() => {
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

/** A /proc stand-in with these files (paths relative to it), and a directory for cgroup mounts. */
function fakeHost(files: (cg: string) => Record<string, string>): { proc: string; cg: string } {
  const root = mkdtempSync(join(tmpdir(), 'kandev-host-'));
  roots.push(root);
  const cg = join(root, 'cg');
  mkdirSync(join(cg, 'cpu'), { recursive: true });
  const proc = join(root, 'proc');
  for (const [path, text] of Object.entries(files(cg))) {
    mkdirSync(dirname(join(proc, path)), { recursive: true });
    writeFileSync(join(proc, path), text);
  }
  return { proc, cg };
}

const STAT = '77 (node) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0\n';

describe('probeHost', () => {
  it('a Linux host with children files, autogroups, cgroup v1 and root capabilities', () => {
    const { proc, cg } = fakeHost((cg) => ({
      'self/stat': STAT,
      'self/task/77/children': '',
      'self/status': 'Name:\tnode\nCapEff:\t000001ffffffffff\n',
      'self/autogroup': '/autogroup-3 nice 0\n',
      'sys/kernel/sched_autogroup_enabled': '1\n',
      'self/mountinfo': `30 24 0:26 / ${cg}/cpu rw - cgroup cgroup rw,cpu\n`,
      'self/cgroup': '1:cpu:/\n0::/\n',
    }));
    expect(probeHost({ proc, euid: 0 })).toEqual({
      proc: true,
      procChildren: true,
      autogroups: true,
      cpuCgroup: { version: 1, dir: `${cg}/cpu`, writable: true },
      euid: 0,
      capEff: 0x1ffffffffffn,
      canSwitchUids: true,
    });
  });

  it('cgroup v2, autogroups turned off, no children files, an unprivileged uid', () => {
    const { proc, cg } = fakeHost((cg) => ({
      'self/stat': STAT,
      'self/status': 'Name:\tnode\nCapEff:\t0000000000000000\n',
      'self/autogroup': '/autogroup-3 nice 0\n',
      'sys/kernel/sched_autogroup_enabled': '0\n',
      'self/mountinfo': `40 24 0:36 / ${cg} rw - cgroup2 cgroup2 rw\n`,
      'self/cgroup': '0::/cpu\n',
    }));
    const h = probeHost({ proc, euid: 1000 });
    expect(h).toMatchObject({ proc: true, procChildren: false, autogroups: false, euid: 1000, capEff: 0n, canSwitchUids: false });
    expect(h.cpuCgroup).toMatchObject({ version: 2, dir: `${cg}/cpu` });
  });

  it('no /proc at all: nothing to plan on, and the reason for the missing cgroup', () => {
    const h = probeHost({ proc: join(tmpdir(), 'kandev-no-such-proc'), euid: null });
    expect(h).toEqual({
      proc: false,
      procChildren: false,
      autogroups: false,
      cpuCgroup: { version: null, reason: 'no /proc/self/mountinfo or /proc/self/cgroup' },
      euid: null,
      capEff: null,
      canSwitchUids: false,
    });
    expect(describeHost(h)).toBe(
      'no /proc, no children files, no autogroups, no cpu cgroup (no /proc/self/mountinfo or /proc/self/cgroup), no uids, may not switch uids',
    );
  });
});

describe('hostSupport on this machine', () => {
  const h = hostSupport();
  it('is probed once', () => {
    expect(hostSupport()).toBe(h);
  });

  it('agrees with what the test helpers tell from the kernel files independently', () => {
    expect(h.proc).toBe(existsSync('/proc/self/stat'));
    expect(h.autogroups).toBe(AUTOGROUPS.present);
    expect(h.euid).toBe(process.geteuid?.() ?? null);
    if (ROOT.present) expect(h.canSwitchUids).toBe(true);
    // Where the tests find a cpu cgroup the stopping group can be made in, the probe finds the same one, writable.
    if (TEST_CPU_CGROUP) expect(h.cpuCgroup).toEqual({ version: TEST_CPU_CGROUP.version, dir: TEST_CPU_CGROUP.dir, writable: true });
    process.stderr.write(`[host] ${describeHost(h)}\n`);
  });
});
