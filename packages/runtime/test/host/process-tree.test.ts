import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { childProcesses, isAlive, processRef, processTree } from '../../src/host/process-tree.js';

/*
 * The walk of a process tree through /proc (process-tree.ts), against real processes. A child
 * belongs to the thread that forked it: Codex, a multi-threaded Rust program, forks its shell
 * commands from worker threads, so a walk that read only the leader's children would miss them.
 */

const spawned: ChildProcess[] = [];
const strays: number[] = [];

afterEach(() => {
  for (const pid of strays.splice(0))
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  for (const c of spawned.splice(0)) c.kill('SIGKILL');
});

/** A node process whose worker thread starts `sleep` in a session of its own; resolves with both pids. */
async function processWithChildOfAWorker(): Promise<{ parent: number; child: number }> {
  const worker = `
    const { spawn } = require('node:child_process');
    const { parentPort } = require('node:worker_threads');
    const c = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' });
    c.unref();
    parentPort.postMessage(c.pid);
    setInterval(() => {}, 1000);`;
  const main = `
    const { Worker } = require('node:worker_threads');
    new Worker(${JSON.stringify(worker)}, { eval: true }).on('message', (pid) => console.log(pid));`;
  const parent = spawn(process.execPath, ['-e', main], { stdio: ['ignore', 'pipe', 'inherit'] });
  spawned.push(parent);
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: parent.stdout! }).once('line', resolve);
    parent.once('exit', (code) => reject(new Error(`the test process exited (${code}) before its worker started a child`)));
  });
  const child = Number(line);
  strays.push(child);
  return { parent: parent.pid!, child };
}

describe('processTree', () => {
  it('finds a child forked by a thread other than the leader', async () => {
    const { parent, child } = await processWithChildOfAWorker();
    // The premise: the leader's own children file does not list it, only the worker thread's does.
    expect(readFileSync(`/proc/${parent}/task/${parent}/children`, 'utf8').split(' ').map(Number)).not.toContain(child);

    const tree = processTree(parent);
    expect(tree.map((p) => p.pid)).toEqual([parent, child]);
    // setsid: its own group, so only the walk (not a signal to the parent's group) reaches it.
    expect(tree[1]!.pgid).toBe(child);
    expect(childProcesses(parent).map((p) => p.pid)).toEqual([child]);
  });

  it('finds nothing once the process is gone, and tells a recycled pid from the process noted', async () => {
    const { parent, child } = await processWithChildOfAWorker();
    const ref = processRef(parent);
    expect(isAlive(ref)).toBe(true);
    expect(isAlive({ pid: parent, startTime: '1' })).toBe(false);
    const exited = new Promise((r) => spawned[0]!.once('exit', r));
    process.kill(parent, 'SIGKILL');
    await exited;
    expect(isAlive(ref)).toBe(false);
    expect(processTree(parent)).toEqual([]);
    // The worker's child outlives it, re-parented away: a walk from it still finds it.
    expect(processTree(child).map((p) => p.pid)).toEqual([child]);
  });
});
