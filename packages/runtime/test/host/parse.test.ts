import { describe, expect, it } from 'vitest';
import {
  Cap,
  hasEnded,
  holdsCaps,
  parseCapEff,
  parseChildren,
  parseCmdline,
  parseMachineBusyTicks,
  parseProcStat,
  parseSchedstatNs,
  statusIsZombie,
  statusUids,
} from '../../src/host/parse.js';

/* The /proc texts as the kernel writes them (proc(5)), read by the host module's plain parsers. */

describe('/proc/<pid>/stat', () => {
  const stat = (comm: string, state = 'S') =>
    `4242 (${comm}) ${state} 17 4242 4242 0 -1 4194560 1200 0 0 0 31 7 2 3 20 0 11 0 987654 1234567 890 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n`;

  it('reads the fixed fields after the command name', () => {
    expect(parseProcStat(4242, stat('node'))).toEqual({
      pid: 4242,
      ppid: 17,
      pgid: 4242,
      session: 4242,
      state: 'S',
      utime: 31,
      stime: 7,
      cutime: 2,
      cstime: 3,
      startTime: '987654',
    });
  });

  it('a command name with spaces and parentheses does not shift the fields (the last ")" ends it)', () => {
    expect(parseProcStat(4242, stat('a) (b c) Z'))).toMatchObject({ state: 'S', ppid: 17, startTime: '987654' });
  });

  it('a text that is not a stat line is no stat', () => {
    expect(parseProcStat(1, '')).toBeUndefined();
    expect(parseProcStat(1, '1 (init) S 0')).toBeUndefined();
  });

  it('a zombie and a dead process have ended; sleeping, running and stopped ones have not', () => {
    expect(['Z', 'X'].map(hasEnded)).toEqual([true, true]);
    expect(['R', 'S', 'D', 'T'].map(hasEnded)).toEqual([false, false, false, false]);
  });
});

describe('the other per-process files', () => {
  it('children: space-separated pids, empty for none', () => {
    expect(parseChildren('12 13 99 \n')).toEqual([12, 13, 99]);
    expect(parseChildren('')).toEqual([]);
    expect(parseChildren('\n')).toEqual([]);
  });

  it('cmdline: NUL-separated arguments as one line', () => {
    expect(parseCmdline('node\0/app/agentctl.bundle.js\0--x\0')).toBe('node /app/agentctl.bundle.js --x');
    expect(parseCmdline('')).toBe('');
  });

  it('status: every uid, the zombie state and CapEff', () => {
    const status = 'Name:\tnode\nState:\tS (sleeping)\nUid:\t1000\t1001\t1002\t1003\nGid:\t5\t5\t5\t5\nCapEff:\t00000000000000c1\n';
    expect(statusUids(status)).toEqual([1000, 1001, 1002, 1003]);
    expect(parseCapEff(status)).toBe(0xc1n);
    expect(statusIsZombie(status)).toBe(false);
    expect(statusIsZombie('Name:\tx\nState:\tZ (zombie)\n')).toBe(true);
    expect(statusUids('Name: x')).toEqual([]);
    expect(parseCapEff('Name: x')).toBeNull();
  });

  it('capabilities: held only when every bit asked for is set; unknown holds none', () => {
    const bits = (...c: number[]) => c.reduce((m, b) => m | (1n << BigInt(b)), 0n);
    expect(holdsCaps(bits(Cap.SETUID, Cap.SETGID, Cap.KILL), [Cap.SETUID, Cap.SETGID])).toBe(true);
    expect(holdsCaps(bits(Cap.SETUID), [Cap.SETUID, Cap.SETGID])).toBe(false);
    expect(holdsCaps(null, [])).toBe(false);
    // Root's full set as the kernel shows it (CapEff 000001ffffffffff).
    expect(holdsCaps(parseCapEff('CapEff:\t000001ffffffffff\n'), Object.values(Cap))).toBe(true);
  });

  it('schedstat: the run time in nanoseconds (first field)', () => {
    expect(parseSchedstatNs('123456789 5000 42\n')).toBe(123456789);
    expect(parseSchedstatNs('')).toBe(0);
  });
});

describe('/proc/stat', () => {
  it("the machine's busy ticks: user, nice, system, irq, softirq and steal, not idle or iowait", () => {
    expect(parseMachineBusyTicks('cpu  100 20 30 5000 700 4 6 8 0 0\ncpu0 50 10 15 2500 350 2 3 4 0 0\n')).toBe(100 + 20 + 30 + 4 + 6 + 8);
  });
});
