import { createLogger, EventPublisher } from '@kandev/runtime';
import { startNats } from '@kandev/testkit';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanUpLeftovers } from '../src/flows/startup-cleanup.js';
import { AgentIsolation } from '../src/isolation/agent-isolation.js';
import { EventJournal } from '../src/store/event-journal.js';
import { ExecutionRegistry } from '../src/store/registry.js';
import { StateFile } from '../src/store/state-file.js';
import { eventually, natsClient } from './helpers.js';

/*
 * Two lifecycle instances on one host (npm start with replicas) share AGENT_UID_RANGE and the work
 * root: a uid one of them holds for an execution it has not spawned yet is never handed out by the
 * other (the lock file in the host's lock directory, /run/kandev/agent-uids by default).
 *
 * The uids are this file's alone: 29980-29983 and 29994-29995, clear of isolation.test.ts's
 * 29990-29991 (its agents run while this file may) and of the workers' slices (20000-29499).
 */

const DIST = pathToFileURL(join(import.meta.dirname, '../dist/isolation/agent-isolation.js')).href;
const log = createLogger('uid-lock-test', 'silent');

describe('uids across lifecycle instances of one host', { timeout: 60_000 }, () => {
  const root = mkdtempSync(join(tmpdir(), 'kandev-uid-lock-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('a uid held by another process is skipped, and free again once that process is gone', async () => {
    const code = `
      const { AgentIsolation } = await import(${JSON.stringify(DIST)});
      const iso = new AgentIsolation({ workRoot: ${JSON.stringify(join(root, 'work-other'))}, uidLockDir: ${JSON.stringify(join(root, 'uids'))}, uidRange: '29980-29981', setting: 'auto', log: { info() {}, warn() {}, error() {}, debug() {}, child() { return this; } } });
      const p = await iso.place('other-execution', 'ws', 'task-other', null);
      process.stdout.write(p.identity.uid + '\\n');
      setInterval(() => {}, 1 << 30);`;
    const other = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
    const otherUid = await new Promise<number>((resolve, reject) => {
      createInterface({ input: other.stdout! }).once('line', (l) => resolve(Number(l)));
      other.once('exit', (c) => reject(new Error(`helper exited ${c}`)));
    });
    expect(otherUid).toBe(29980);

    // Another work root (each test stack or replica has its own): the host's lock directory still decides.
    const iso = new AgentIsolation({ workRoot: join(root, 'work'), uidLockDir: join(root, 'uids'), uidRange: '29980-29981', setting: 'auto', log });
    const mine = await iso.place('my-execution', 'ws', 'task-mine', null);
    expect(mine.identity!.uid).toBe(29981);
    await expect(iso.place('one-too-many', 'ws', 'task-3', null)).rejects.toMatchObject({ code: 'UNAVAILABLE' });

    // The other instance dies without releasing: its lock is stale and the uid is free.
    other.kill('SIGKILL');
    await new Promise((r) => other.once('exit', r));
    const next = await iso.place('after-crash', 'ws', 'task-4', null);
    expect(next.identity!.uid).toBe(29980);
    await iso.finish(mine);
    await iso.finish(next);
  });

  it("by default, instances with different work roots (replicas, test stacks) share the host's locks", async () => {
    const code = `
      const { AgentIsolation } = await import(${JSON.stringify(DIST)});
      const iso = new AgentIsolation({ workRoot: ${JSON.stringify(join(root, 'stack-a'))}, uidRange: '29994-29995', setting: 'auto', log: { info() {}, warn() {}, error() {}, debug() {}, child() { return this; } } });
      const p = await iso.place('stack-a-execution', 'ws', 'task-a', null);
      process.stdout.write(p.identity.uid + '\\n');
      setInterval(() => {}, 1 << 30);`;
    const other = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const otherUid = await new Promise<number>((resolve, reject) => {
        createInterface({ input: other.stdout! }).once('line', (l) => resolve(Number(l)));
        other.once('exit', (c) => reject(new Error(`helper exited ${c}`)));
      });
      expect(otherUid).toBe(29994);
      // No process runs under 29994 (nothing was spawned): only the host's lock keeps it from this instance.
      const iso = new AgentIsolation({ workRoot: join(root, 'stack-b'), uidRange: '29994-29995', setting: 'auto', log });
      const mine = await iso.place('stack-b-execution', 'ws', 'task-b', null);
      expect(mine.identity!.uid).toBe(29995);
      await iso.finish(mine);
    } finally {
      // The helper may have exited already (its error is on stderr): then there is no exit to wait for.
      if (other.exitCode === null && other.signalCode === null) {
        const exited = new Promise((r) => other.once('exit', r));
        other.kill('SIGKILL');
        await exited;
      }
    }
  });
  it("a restarted instance sweeps a previous run's uid only once it holds it again, never one another instance took meanwhile (R-6.4)", async () => {
    const lockDir = join(root, 'sweep-uids');
    mkdirSync(lockDir, { recursive: true });
    const stateDir = join(root, 'sweep-state');
    const procs: ChildProcess[] = [];
    const under = (uid: number) => {
      const p = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1 << 30)'], { uid, gid: uid, stdio: 'ignore', cwd: '/' });
      procs.push(p);
      return p;
    };
    const alive = (p: ChildProcess) => p.exitCode === null && p.signalCode === null;
    const nats = await startNats();
    const nc = await natsClient(nats.url, 'uid-sweep-test');
    try {
      // The previous run had executions under 29982 and 29983. Since it died, another live instance
      // (here: a process standing in for it) took 29982 and runs an agent under it; 29983's lock is
      // the dead run's own, stale.
      const otherInstance = under(process.getuid!());
      const othersAgent = under(29982);
      const leftover = under(29983);
      writeFileSync(join(lockDir, '29982'), String(otherInstance.pid));
      writeFileSync(join(lockDir, '29983'), '4194303');
      const previous = new StateFile(stateDir, 'life-sweep');
      const gone = { pid: 4194302, start_time: '1' };
      for (const uid of [29982, 29983]) {
        previous.set({
          execution_id: randomUUID(),
          workspace_id: randomUUID(),
          task_id: randomUUID(),
          session_id: randomUUID(),
          agentctl: gone,
          agent: null,
          uid,
        });
      }

      const journal = new EventJournal(stateDir, 'life-sweep', new EventPublisher(nc), log);
      journal.open();
      const registry = await ExecutionRegistry.open(nc, 60_000, log);
      const isolation = new AgentIsolation({ workRoot: join(root, 'sweep-work'), uidLockDir: lockDir, uidRange: '29982-29983', setting: 'auto', log });
      const lost = await cleanUpLeftovers({
        instanceId: 'life-sweep',
        stateFile: new StateFile(stateDir, 'life-sweep'),
        registry,
        journal,
        uids: isolation,
        log,
      });
      journal.close();

      expect(lost).toBe(2);
      await eventually(
        () => alive(leftover),
        (a) => !a,
      );
      expect(alive(othersAgent)).toBe(true);
      // The other instance still holds its uid; the swept one is free again.
      expect(readFileSync(join(lockDir, '29982'), 'utf8')).toBe(String(otherInstance.pid));
      expect(existsSync(join(lockDir, '29983'))).toBe(false);
    } finally {
      for (const p of procs) if (alive(p)) p.kill('SIGKILL');
      await nc.close();
      await nats.stop();
    }
  });
});
