import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { childProcesses, isAlive, processRef, type ProcessRef } from '../../src/host/process-tree.js';
import { killRetryDelayMs, settledOrAfter, signalProcesses, terminate } from '../../src/host/terminate.js';

/*
 * The one termination helper (terminate.ts) on real processes: SIGTERM → grace → SIGKILL →
 * wait until gone, with process groups, never touching a recycled pid.
 */

/** Every process a test started or found, killed (with its group) after the test, failed or not; by start time, so never a recycled pid. */
const started: ProcessRef[] = [];

afterEach(() => {
  signalProcesses(started.splice(0), 'SIGKILL');
});

/** A process leading a group of its own (as agentctl starts agents and lifecycle starts agentctl): a bash or a node script. */
function leader(
  script: string,
  command = 'bash',
): { child: ChildProcess; ref: ProcessRef; exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>; said: () => string } {
  const child = spawn(command === 'bash' ? 'bash' : process.execPath, [command === 'bash' ? '-c' : '-e', script], {
    detached: true,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const ref = processRef(child.pid!);
  started.push(ref);
  let out = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  // 'close': after the exit and the last of its stdout, so what it said is all there.
  const exit = once(child, 'close').then(([code, signal]) => ({ code: code as number | null, signal: signal as NodeJS.Signals | null }));
  return { child, ref, exit, said: () => out };
}

/** Says `up` once its handler is installed, and `TERM` for every SIGTERM, which it otherwise ignores. */
const IGNORES_SIGTERM = "process.on('SIGTERM', () => process.stdout.write('TERM\\n')); process.stdout.write('up\\n'); setInterval(() => {}, 60000);";

async function until<T>(fn: () => T | undefined, ms = 5_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

function groupOf(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[2]);
}

describe('terminate', () => {
  it('a process that exits on SIGTERM: gone within the grace, never SIGKILLed', async () => {
    const p = leader('echo up; exec sleep 600');
    await until(() => (p.said().includes('up') ? true : undefined));
    const rounds: string[] = [];
    const t0 = performance.now();
    const r = await terminate([p.ref], { graceMs: 10_000, exits: [p.exit], onSignal: (s, _pids, round) => rounds.push(`${round}:${s}`) });
    expect(r).toEqual({ killed: [], survivors: [] });
    expect(await p.exit).toEqual({ code: null, signal: 'SIGTERM' });
    expect(rounds).toEqual(['0:SIGTERM']);
    // Below the grace: the exit event ends the wait, not the grace running out (no tighter, for a
    // starved test lane; the rounds above already say no SIGKILL was sent).
    expect(performance.now() - t0).toBeLessThan(9_000);
    expect(isAlive(p.ref)).toBe(false);
  });

  it('a process that ignores SIGTERM: SIGKILLed once the grace is over, and reported as killed', async () => {
    const p = leader(IGNORES_SIGTERM, 'node');
    await until(() => (p.said().includes('up') ? true : undefined));
    const graceMs = 300;
    const rounds: string[] = [];
    const t0 = performance.now();
    const r = await terminate([p.ref], { graceMs, exits: [p.exit], onSignal: (s, _pids, round) => rounds.push(`${round}:${s}`) });
    const took = performance.now() - t0;
    expect(r.killed.map((x) => x.pid)).toEqual([p.ref.pid]);
    expect(r.survivors).toEqual([]);
    expect(await p.exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(p.said()).toContain('TERM'); // it was asked first
    expect(rounds.slice(0, 2)).toEqual(['0:SIGTERM', '1:SIGKILL']);
    expect(took).toBeGreaterThanOrEqual(graceMs - 5);
  });

  it('a process that forks: its grandchild in the same group goes with it, one in a session of its own ignoring SIGTERM is SIGKILLed', async () => {
    // bash → (a) `sleep` in bash's group, (b) a setsid'd shell that ignores TERM: outside the group.
    const p = leader(`sleep 600 & setsid bash -c "trap '' TERM; echo ignoring; while :; do sleep 0.05; done" & wait`);
    // Both started, the second one in its own session and ignoring SIGTERM already.
    await until(() => (p.said().includes('ignoring') ? true : undefined));
    const [inGroup, ownSession] = await until(() => {
      const kids = childProcesses(p.ref.pid);
      const a = kids.find((k) => k.pgid === p.ref.pid);
      const b = kids.find((k) => k.pgid === k.pid);
      return a && b ? [a, b] : undefined;
    });
    started.push(inGroup!, ownSession!);
    const r = await terminate([p.ref, ownSession!], { graceMs: 300, exits: [p.exit] });
    expect(r.survivors).toEqual([]);
    // bash dies of SIGTERM; its same-group child with it (only the leader was named); the other needed SIGKILL.
    expect(await p.exit).toEqual({ code: null, signal: 'SIGTERM' });
    expect(r.killed.map((x) => x.pid)).toEqual([ownSession!.pid]);
    for (const k of [p.ref, inGroup!, ownSession!]) expect(isAlive(k)).toBe(false);
  });

  it('a target function answers what is live: a look that names a process gone meanwhile does not end the stop, its empty answer does', async () => {
    // The first look names a process that is gone by the time it is checked (as a wrapper that
    // forked and exited between agentctl's look and the check); only a later, wider look finds
    // the process it left. Filtering the first answer here would have ended the stop at once.
    const gone = leader('exit 0');
    await gone.exit;
    const left = leader(IGNORES_SIGTERM, 'node');
    await until(() => (left.said().includes('up') ? true : undefined));
    let looks = 0;
    // No `exits`: with one pending, the wait would not look at all (the next test).
    const r = await terminate(() => (++looks <= 2 ? [gone.ref] : isAlive(left.ref) ? [left.ref] : []), { graceMs: 200 });
    expect(r.killed.map((x) => x.pid)).toEqual([left.ref.pid]);
    expect(r.survivors).toEqual([]);
    expect(await left.exit).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it("while a target's own exit is pending the wait does not look: the targets are asked only to signal and to decide the SIGKILL", async () => {
    const p = leader(IGNORES_SIGTERM, 'node');
    await until(() => (p.said().includes('up') ? true : undefined));
    let looks = 0;
    let looksAtKill: number | undefined;
    const r = await terminate(
      () => {
        looks++;
        return isAlive(p.ref) ? [p.ref] : [];
      },
      {
        graceMs: 300,
        exits: [p.exit],
        onSignal: (signal, _pids, round) => {
          if (round === 1) looksAtKill = looks;
        },
      },
    );
    // The SIGTERM, the decision to kill at the deadline, the SIGKILL: polling every POLL_MS through
    // the grace would have made it about fifteen more.
    expect(looksAtKill).toBe(3);
    expect(r.killed.map((x) => x.pid)).toEqual([p.ref.pid]);
    expect(r.survivors).toEqual([]);
    expect(await p.exit).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('grace 0: SIGKILL at once, nothing before it', async () => {
    const p = leader(IGNORES_SIGTERM, 'node');
    await until(() => (p.said().includes('up') ? true : undefined));
    const rounds: string[] = [];
    const r = await terminate([p.ref], { graceMs: 0, onSignal: (s, _pids, round) => rounds.push(`${round}:${s}`) });
    expect(r.killed.map((x) => x.pid)).toEqual([p.ref.pid]);
    expect(await p.exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(rounds[0]).toBe('1:SIGKILL');
    expect(p.said()).not.toContain('TERM');
  });

  it('with no first signal it only waits out the grace, then SIGKILLs', async () => {
    const p = leader('echo up; exec sleep 600');
    await until(() => (p.said().includes('up') ? true : undefined));
    const r = await terminate([p.ref], { signal: null, graceMs: 200, exits: [p.exit] });
    expect(r.killed.map((x) => x.pid)).toEqual([p.ref.pid]);
    expect(await p.exit).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('nothing alive: returns at once without signalling', async () => {
    const p = leader('exit 0');
    await p.exit;
    let signalled = false;
    expect(await terminate([p.ref], { graceMs: 10_000, onSignal: () => (signalled = true) })).toEqual({ killed: [], survivors: [] });
    expect(signalled).toBe(false);
  });

  it('gives up after the kill window (or when asked) and returns the survivors', async () => {
    // This very process: alive, and never signalled by the helper, so it can only outlast the window.
    const self = processRef(process.pid);
    const t0 = performance.now();
    const r = await terminate([self], { graceMs: 0, killWindowMs: 300 });
    expect(r.survivors).toEqual([self]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(295);
    const asked = await terminate([self], { graceMs: 0, giveUp: () => true });
    expect(asked.survivors).toEqual([self]);
  });
});

describe('settledOrAfter', () => {
  it('ends when one of the promises settles, resolved or rejected, well before the bound', async () => {
    let resolve!: () => void;
    const resolved = new Promise<void>((r) => (resolve = r));
    const t0 = performance.now();
    const waited = settledOrAfter(60_000, [resolved, new Promise(() => undefined)]);
    resolve();
    await waited;
    let reject!: (e: Error) => void;
    const rejected = new Promise<void>((_, r) => (reject = r));
    const waitedForRejection = settledOrAfter(60_000, [rejected]);
    reject(new Error('gone'));
    await waitedForRejection; // a rejection ends the wait, it is not thrown
    expect(performance.now() - t0).toBeLessThan(30_000);
  });

  it('ends at the bound when nothing settles, and leaves no timer behind once it has ended', async () => {
    const t0 = performance.now();
    await settledOrAfter(30, [new Promise(() => undefined)]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(29);
    const before = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    await settledOrAfter(60_000, [Promise.resolve()]);
    expect(process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length).toBe(before);
  });
});

describe('the retry schedule', () => {
  it('re-sends SIGKILL after 50, 100, 200, … ms, at most 2 s apart', () => {
    expect([0, 1, 2, 3].map(killRetryDelayMs)).toEqual([50, 100, 200, 400]);
    expect(killRetryDelayMs(20)).toBe(2000);
  });
});

describe('signalProcesses', () => {
  it('never signals a pid that now belongs to another process', async () => {
    const p = leader('exec sleep 600');
    const impostor = { pid: p.ref.pid, startTime: String(Number(p.ref.startTime) + 1) };
    expect(isAlive(impostor)).toBe(false);
    expect(signalProcesses([impostor], 'SIGKILL')).toEqual([]);
    expect(isAlive(p.ref)).toBe(true);
    expect(signalProcesses([p.ref], 'SIGKILL').map((x) => x.pid)).toEqual([p.ref.pid]);
    expect(await p.exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(isAlive(p.ref)).toBe(false);
  });

  it('signals a process in our own group alone, never the group (that would be us)', async () => {
    const child = spawn('sleep', ['600'], { stdio: 'ignore' });
    const exit = once(child, 'exit');
    const ref = processRef(child.pid!);
    started.push(ref);
    expect(groupOf(ref.pid)).toBe(groupOf(process.pid));
    expect(signalProcesses([ref], 'SIGTERM').map((x) => x.pid)).toEqual([ref.pid]);
    expect((await exit)[1]).toBe('SIGTERM');
  });
});
