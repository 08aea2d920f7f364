import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { lowerAutogroupPriority } from '../../src/host/autogroup.js';

/*
 * A session's autogroup nice (autogroup.ts, ADR 0043): what ranks a detached process's session
 * against the control plane's when the kernel groups by session.
 */
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

/** A process leading a session of its own, as agentctl and the agent are. */
function sessionLeader(): ChildProcess {
  const child = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
  children.push(child);
  return child;
}

const autogroupNice = (pid: number) => /nice (-?\d+)/.exec(readFileSync(`/proc/${pid}/autogroup`, 'utf8'))?.[1];

describe('lowerAutogroupPriority', () => {
  const supported = existsSync('/proc/self/autogroup');

  it(supported ? "sets the nice value of the process's session (its autogroup), not this one's" : 'says a kernel without autogroups has none', async () => {
    const leader = sessionLeader();
    const ownBefore = autogroupNice(process.pid);
    const outcome = await lowerAutogroupPriority(leader.pid!, 7);
    if (!supported) return void expect(outcome).toBe('unsupported');
    expect(outcome).toBe('set');
    expect(autogroupNice(leader.pid!)).toBe('7');
    expect(autogroupNice(process.pid)).toBe(ownBefore);
    // Clamped to what a nice value can be.
    expect(await lowerAutogroupPriority(leader.pid!, 40)).toBe('set');
    expect(autogroupNice(leader.pid!)).toBe('19');
  });

  it('answers for a process that is gone without throwing', async () => {
    const leader = sessionLeader();
    const pid = leader.pid!;
    await new Promise<void>((resolve) => {
      leader.once('exit', () => resolve());
      leader.kill('SIGKILL');
    });
    expect(['unsupported', 'gone']).toContain(await lowerAutogroupPriority(pid, 5));
  });
});
