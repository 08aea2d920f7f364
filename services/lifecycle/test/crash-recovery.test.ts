import { Buckets, pingEndpoint } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { Kvm } from '@nats-io/kv';
import { type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  EventLog,
  FakeOrchestrator,
  eventually,
  killHard,
  kvEntry,
  launch,
  launchRequest,
  natsClient,
  processGone,
  promptAt,
  script,
  spawnLifecycle,
  tmpStateDir,
} from './helpers.js';

describe('a lifecycle instance killed hard (R-6.4)', () => {
  const children: ChildProcess[] = [];
  const leftoverPids: number[] = [];
  const cleanups: Array<() => Promise<void>> = [];

  afterEach(async () => {
    for (const c of children.splice(0)) await killHard(c);
    // Never leak agents from a failed run.
    for (const pid of leftoverPids.splice(0)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    for (const fn of cleanups.splice(0)) await fn();
  });

  async function setup(ttlMs: number, exitWithLifecycle = false) {
    const nats: TestNats = await startNats();
    const nc: NatsConnection = await natsClient(nats.url, 'crash-test');
    const stateDir = tmpStateDir();
    cleanups.push(async () => {
      await nc.close();
      await nats.stop();
      rmSync(stateDir, { recursive: true, force: true });
    });
    await FakeOrchestrator.start(nc);
    const events = new EventLog(nc);
    // Agents outlive their instance here (as when agentctl cannot notice), so the restart cleanup is what is tested.
    const env = {
      NATS_URL: nats.url,
      INSTANCE_ID: 'life-crash',
      KANDEV_STATE_DIR: stateDir,
      REGISTRY_TTL_MS: String(ttlMs),
      AGENTS_EXIT_WITH_LIFECYCLE: exitWithLifecycle ? 'true' : 'false',
    };
    const start = async (onLine?: (line: string) => void) => {
      const c = await spawnLifecycle(env, onLine);
      children.push(c);
      // Its endpoints answer (the subscriptions reached the server) before the test sends anything.
      await eventually(
        () =>
          request(nc, pingEndpoint('lifecycle'), {}, { timeoutMs: 1_000 }).then(
            () => true,
            () => false,
          ),
        (ok) => ok,
        10_000,
      );
      return c;
    };
    await new Kvm(nc).create(Buckets.executions, { history: 1, ttl: ttlMs });
    return { nc, events, start, stateDir };
  }

  it('its registry entries expire after the TTL; a restart with the same instance id and state dir kills the leftover agents', async () => {
    // Long enough that the entries are still there when the test reads them right after the kill,
    // on a starved runner too (1.5 s was not: the last refresh can be a third of the TTL old).
    const ttlMs = 5_000;
    const { nc, events, start, stateDir } = await setup(ttlMs);
    const first = await start();
    const execs = await Promise.all([launch(nc, launchRequest()), launch(nc, launchRequest({ agent: 'scripted-codex' }))]);
    const busy = randomUUID();
    await promptAt(nc, 'life-crash', { execution_id: execs[0].execution_id, turn_id: busy, prompt: script([{ sleep_ms: 60_000 }]) });
    const pids = execs.flatMap((x) => [x.pid!, x.agentctl_pid!]);
    leftoverPids.push(...pids);
    const state = JSON.parse(readFileSync(join(stateDir, 'lifecycle', 'life-crash.json'), 'utf8')) as {
      executions: Array<{ execution_id: string; agent: { pid: number } }>;
    };
    expect(state.executions.map((e) => e.agent.pid).sort()).toEqual(execs.map((x) => x.pid!).sort());

    await killHard(first);
    // Nobody refreshes the entries any more, but the agents live on.
    for (const pid of pids) expect(processGone(pid)).toBe(false);
    for (const x of execs) expect(await kvEntry(nc, x.execution_id)).not.toBeNull();
    const t0 = performance.now();
    for (const x of execs)
      await eventually(
        () => kvEntry(nc, x.execution_id),
        (e) => e === null,
        ttlMs + 10_000,
        100,
      );
    console.info(`[timing] registry entries of the killed instance expired ${(performance.now() - t0).toFixed(0)} ms after the kill (TTL ${ttlMs} ms)`);
    for (const pid of pids) expect(processGone(pid)).toBe(false);

    await start();
    for (const pid of pids) expect(processGone(pid)).toBe(true);
    for (const x of execs) {
      const lost = await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id);
      expect(lost.data).toMatchObject({ how: 'lost', pid: x.pid, reason: 'lifecycle_instance_restarted' });
      expect(lost).toMatchObject({ task_id: x.task_id, session_id: x.session_id, workspace_id: x.workspace_id });
    }
    const after = JSON.parse(readFileSync(join(stateDir, 'lifecycle', 'life-crash.json'), 'utf8')) as { executions: unknown[] };
    expect(after.executions).toEqual([]);
  }, 90_000);

  it('a restart before the TTL deletes the entries the dead run still owned', async () => {
    const { nc, events, start } = await setup(30_000);
    const first = await start();
    const x = await launch(nc, launchRequest());
    leftoverPids.push(x.pid!, x.agentctl_pid!);
    await killHard(first);
    expect(await kvEntry(nc, x.execution_id)).not.toBeNull();

    await start();
    expect(await kvEntry(nc, x.execution_id)).toBeNull();
    expect(processGone(x.pid!)).toBe(true);
    expect(processGone(x.agentctl_pid!)).toBe(true);
    const lost = events.of('execution.stopped', x.execution_id);
    expect(lost.map((e) => e.data.how)).toEqual(['lost']);
  });

  it('by default, agents die with their lifecycle instance: nothing lingers after a SIGKILL (B-4)', async () => {
    const { nc, start, stateDir } = await setup(30_000, true);
    const first = await start();
    const x = await launch(nc, launchRequest());
    leftoverPids.push(x.pid!, x.agentctl_pid!);
    await promptAt(nc, 'life-crash', { execution_id: x.execution_id, turn_id: randomUUID(), prompt: script([{ sleep_ms: 60_000 }]) });
    await killHard(first);
    // agentctl sees its stdin pipe close and stops the agent (grace 2 s for a signal-less exit).
    await eventually(
      () => Promise.resolve(processGone(x.pid!) && processGone(x.agentctl_pid!)),
      (gone) => gone,
      10_000,
      100,
    );

    // Its stderr had no reader any more: what it said while stopping the agent went to a file in the
    // state dir, which the next run relays into its own log (at the lines' own levels) and removes.
    const lines: string[] = [];
    await start((l) => lines.push(l));
    // stderr is captured too: only the JSON log lines are read.
    const relayed = lines
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: string; msg: string; execution_id?: string; previous_run?: boolean; agentctl?: { msg: string } })
      .filter((l) => l.previous_run && l.execution_id === x.execution_id);
    expect(relayed.map((l) => l.agentctl?.msg)).toContain('parent is gone (stdin closed); stopping the agent');
    expect(relayed.find((l) => l.agentctl?.msg === 'parent is gone (stdin closed); stopping the agent')?.level).toBe('warn');
    expect(existsSync(join(stateDir, 'lifecycle', 'life-crash.agentctl'))).toBe(false);
  });
});
