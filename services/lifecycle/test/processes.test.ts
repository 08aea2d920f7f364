import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { processRef, signalProcess } from '../src/processes.js';

/*
 * The direct-kill fallback (agentctl gone or silent): agents lead process groups of their own, so
 * lifecycle signals the group and what the agent started goes with it.
 */

const running = (pid: number) => {
  try {
    const state = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0];
    return state !== undefined && state !== 'Z';
  } catch {
    return false;
  }
};

async function until(fn: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A group leader (as agentctl starts agents) with a child in its group. */
async function groupWithChild() {
  const leader = spawn('bash', ['-c', 'sleep 3000 & wait'], { detached: true, stdio: 'ignore' });
  const children = () => readFileSync(`/proc/${leader.pid}/task/${leader.pid}/children`, 'utf8').trim().split(' ').filter(Boolean).map(Number);
  await until(() => children().length > 0);
  return { leader, child: children()[0]! };
}

describe('signalProcess', () => {
  it('signals the whole group of a group leader with { group: true }', async () => {
    const { leader, child } = await groupWithChild();
    expect(signalProcess(processRef(leader.pid!), 'SIGKILL', { group: true })).toBe(true);
    await until(() => !running(child));
    await until(() => !running(leader.pid!));
  });

  it('signals only the process itself without it', async () => {
    const { leader, child } = await groupWithChild();
    try {
      expect(signalProcess(processRef(leader.pid!), 'SIGKILL')).toBe(true);
      await until(() => !running(leader.pid!));
      expect(running(child)).toBe(true);
    } finally {
      process.kill(-leader.pid!, 'SIGKILL');
    }
  });

  it('never signals a pid that now belongs to another process', () => {
    // SIGCONT: harmless to this very process if the check were broken.
    expect(signalProcess({ pid: process.pid, startTime: '1' }, 'SIGCONT', { group: true })).toBe(false);
  });
});
