import { getPriority } from 'node:os';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentProcess, nextTreeRefreshMs, TREE_REFRESH_MAX_MS, TREE_REFRESH_MS } from '../src/agent-process.js';
import { createLogger } from '../src/log.js';
import { processTree } from '@kandev/runtime/host';

/*
 * The stop of an agent's whole process tree (agent-process.ts). The "agent" is a shell that starts
 * a command in a session of its own (as Codex runs shell commands in a pseudo-terminal) which
 * ignores SIGTERM: only a stop that notes the tree and SIGKILLs what is left after the grace ends it.
 */

const log = createLogger({ test: 'agent-process' }, 'error', new PassThrough());
const started: AgentProcess[] = [];

function running(pid: number): boolean {
  try {
    const state = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0];
    return state !== undefined && state !== 'Z';
  } catch {
    return false;
  }
}

function sleepers(needle: string): number[] {
  return readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .filter((n) => {
      try {
        return readFileSync(`/proc/${n}/cmdline`, 'utf8').replace(/\0/g, ' ').startsWith(needle) && running(Number(n));
      } catch {
        return false;
      }
    })
    .map(Number);
}

async function until<T>(fn: () => T | undefined | false, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function agentWithStubbornCommand(leaderIgnoresTerm: boolean, agentNice = 0) {
  const needle = `sleep ${5000 + Math.floor(Math.random() * 999)}.${process.pid % 1000}`;
  // With a nice increment the command starts a moment later, as an agent's tools do: after the spawn.
  const script = `${agentNice ? 'sleep 0.3; ' : ''}${leaderIgnoresTerm ? "trap '' TERM; " : ''}setsid bash -c "trap '' TERM HUP; ${needle}" & wait`;
  const agent = await AgentProcess.start(
    { name: 'shell', protocol: 'acp', command: 'bash', args: ['-c', script], env: {} },
    { cwd: process.cwd(), env: process.env, agentNice },
    log,
  );
  started.push(agent);
  const [sleeper] = await until(() => {
    const found = sleepers(needle);
    return found.length > 0 ? found : undefined;
  });
  return { agent, sleeper: sleeper!, needle };
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((a) => a.terminate(0)));
});

describe('AgentProcess', () => {
  it('runs the agent as the leader of a process group of its own', async () => {
    const { agent } = await agentWithStubbornCommand(false);
    const [leader] = processTree(agent.pid);
    expect(leader).toMatchObject({ pid: agent.pid, pgid: agent.pid });
    const own = Number(readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ')[2]);
    expect(own).not.toBe(agent.pid);
  });

  it('runs the agent, and what it starts afterwards, the configured nice levels below agentctl', async () => {
    const { agent, sleeper } = await agentWithStubbornCommand(false, 7);
    // /proc/<pid>/stat field 19 is the nice value (after the command name, which ends with ')').
    const nice = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]);
    expect(nice(agent.pid)).toBe(Math.min(19, getPriority() + 7));
    expect(nice(sleeper)).toBe(nice(agent.pid));
    expect(nice(process.pid)).toBe(getPriority());
  });

  it('stops a command the agent started in a session of its own, which ignores SIGTERM', async () => {
    const { agent, sleeper, needle } = await agentWithStubbornCommand(false);
    // In another session, so not in the agent's process group: a group signal alone would miss it.
    expect(processTree(agent.pid).find((p) => p.pid === sleeper)?.pgid).not.toBe(agent.pid);
    const t = await agent.terminate(300);
    expect(t.how).toBe('graceful');
    expect(running(sleeper)).toBe(false);
    expect(sleepers(needle)).toEqual([]);
  });

  it('kills the agent and its tree when the agent ignores SIGTERM', async () => {
    const { agent, sleeper } = await agentWithStubbornCommand(true);
    const t = await agent.terminate(300);
    expect(t.how).toBe('killed');
    expect(running(agent.pid)).toBe(false);
    expect(running(sleeper)).toBe(false);
  });

  it('stops what a command forked after the stop began, in the group of a wrapper that exited on SIGTERM', async () => {
    const needle = `sleep ${6000 + Math.floor(Math.random() * 999)}.${process.pid % 1000}`;
    const dir = mkdtempSync(join(tmpdir(), 'agentctl-wrapper-'));
    try {
      // The wrapper (a session of its own) answers SIGTERM by forking a SIGTERM-proof subshell and
      // exiting: the subshell exists only after the stop's first look at the tree, its parent is gone
      // by the next, and it is re-parented to init, in the wrapper's group.
      const wrapper = join(dir, 'wrapper.sh');
      writeFileSync(wrapper, `trap '(trap "" TERM HUP; exec ${needle}) & exit 0' TERM\nwhile :; do sleep 0.05; done\n`);
      const agent = await AgentProcess.start(
        { name: 'shell', protocol: 'acp', command: 'bash', args: ['-c', `setsid bash ${wrapper} & wait`], env: {} },
        { cwd: process.cwd(), env: process.env, agentNice: 0 },
        log,
      );
      started.push(agent);
      // Both noted before the stop: the agent and the wrapper (agentctl walks the tree every second).
      await until(() => agent.survivors().some((p) => p.pid !== agent.pid && p.pgid !== agent.pid), 5_000);
      const t = await agent.terminate(300);
      expect(t.how).toBe('graceful'); // the agent itself went on SIGTERM
      expect(sleepers(needle)).toEqual([]);
    } finally {
      for (const pid of sleepers(needle)) process.kill(pid, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('stops what a wrapper that exited before the stop left in its group, where no walk reaches it', async () => {
    const needle = `sleep ${7000 + Math.floor(Math.random() * 999)}.${process.pid % 1000}`;
    const dir = mkdtempSync(join(tmpdir(), 'agentctl-wrapper-'));
    try {
      // The wrapper (a session of its own) waits to be noted, then backgrounds a SIGTERM-proof
      // subshell and exits at once: the subshell is re-parented to init before any walk sees it.
      const wrapper = join(dir, 'wrapper.sh');
      writeFileSync(wrapper, `while [ ! -e ${join(dir, 'go')} ]; do sleep 0.05; done\n(trap "" TERM HUP; exec ${needle}) &\nexit 0\n`);
      const agent = await AgentProcess.start(
        { name: 'shell', protocol: 'acp', command: 'bash', args: ['-c', `setsid bash ${wrapper} & exec sleep 600`], env: {} },
        { cwd: process.cwd(), env: process.env, agentNice: 0 },
        log,
      );
      started.push(agent);
      const group = await until(() => agent.survivors().find((p) => p.pgid !== agent.pid)?.pgid, 5_000);
      writeFileSync(join(dir, 'go'), '');
      const [stray] = await until(() => (sleepers(needle).length > 0 && !running(group) ? sleepers(needle) : undefined), 5_000);
      const t = await agent.terminate(300);
      expect(t.how).toBe('graceful');
      expect(running(stray!)).toBe(false);
    } finally {
      for (const pid of sleepers(needle)) process.kill(pid, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('sweeps what an agent left behind when it exited on its own', async () => {
    const { agent, sleeper } = await agentWithStubbornCommand(false);
    // agentctl notes the tree every second; a command younger than that is not known yet.
    await until(() => agent.survivors().some((p) => p.pid === sleeper), 5_000);
    // The agent (bash waiting on its job) dies at once; its command keeps running, re-parented away.
    process.kill(agent.pid, 'SIGKILL');
    await agent.exited;
    expect(running(sleeper)).toBe(true);
    await agent.terminate(300);
    expect(running(sleeper)).toBe(false);
  });
});

describe('nextTreeRefreshMs', () => {
  it('looks every second while the tree changes, and backs off to the bound while it stays as it was', () => {
    expect(nextTreeRefreshMs(TREE_REFRESH_MS, true)).toBe(TREE_REFRESH_MS);
    let ms = TREE_REFRESH_MS;
    const waits: number[] = [];
    for (let i = 0; i < 6; i++) waits.push((ms = nextTreeRefreshMs(ms, false)));
    expect(waits).toEqual([2_000, 4_000, 8_000, 8_000, 8_000, 8_000]);
    expect(TREE_REFRESH_MAX_MS).toBe(8_000);
    expect(nextTreeRefreshMs(TREE_REFRESH_MAX_MS, true)).toBe(TREE_REFRESH_MS);
  });
});
