// A lifecycle instance stalled (SIGSTOP) for longer than the registry TTL: its entries
// lapse and the orchestrator may give its executions up meanwhile. On SIGCONT each execution is
// re-registered at once and put to the launch fence again: the ones still wanted stay, the ones
// given up are stopped. No agent runs unregistered for longer than one refresh period (TTL/3) after
// the stall ends, plus the fence round trip and the teardown grace (docs/operations.md).
import { Buckets, Life, pingEndpoint } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { Kvm } from '@nats-io/kv';
import { type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
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

const TTL_MS = 1_500;
const GRACE_MS = 1_000;
const cleanups: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

/** A lifecycle instance (own process, so it can be frozen) with two agents running a long turn. */
async function stallWorld(instanceId: string, extraEnv: Record<string, string> = {}) {
  const nats: TestNats = await startNats();
  const nc = await natsClient(nats.url, 'stall-test');
  const stateDir = tmpStateDir();
  cleanups.push(async () => {
    await nc.close();
    await nats.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });
  const orch = await FakeOrchestrator.start(nc);
  const events = new EventLog(nc);
  await new Kvm(nc).create(Buckets.executions, { history: 1, ttl: TTL_MS });
  const logs: string[] = [];
  const child: ChildProcess = await spawnLifecycle(
    {
      NATS_URL: nats.url,
      INSTANCE_ID: instanceId,
      KANDEV_STATE_DIR: stateDir,
      REGISTRY_TTL_MS: String(TTL_MS),
      TEARDOWN_GRACE_MS: String(GRACE_MS),
      ...extraEnv,
    },
    (l) => logs.push(l),
  );
  cleanups.push(async () => {
    child.kill('SIGCONT');
    await killHard(child);
  });
  await eventually(
    () =>
      request(nc, pingEndpoint('lifecycle'), {}, { timeoutMs: 1_000 }).then(
        () => true,
        () => false,
      ),
    (ok) => ok,
    10_000,
  );
  const executions = await Promise.all([launch(nc, launchRequest()), launch(nc, launchRequest())]);
  for (const x of executions) {
    await promptAt(nc, instanceId, { execution_id: x.execution_id, turn_id: randomUUID(), prompt: script([{ sleep_ms: 60_000 }]) });
    cleanups.push(() => {
      for (const pid of [x.pid!, x.agentctl_pid!]) if (!processGone(pid)) process.kill(pid, 'SIGKILL');
    });
  }
  return { nc, orch, events, logs, child, executions };
}

describe('a lifecycle instance stalled longer than the registry TTL', () => {
  it('re-registers the executions still wanted and stops the ones given up meanwhile', async () => {
    // This case is about re-admission: agentctl must not give up on its owner during the stall.
    const { nc, orch, events, logs, child, executions } = await stallWorld('life-stall', { AGENT_OWNER_SILENCE_MS: '600000' });
    const [kept, givenUp] = executions as [(typeof executions)[0], (typeof executions)[0]];
    const admissionsBefore = orch.admitted.length;

    child.kill('SIGSTOP');
    // The entries lapse while the instance cannot refresh them...
    for (const x of [kept, givenUp])
      await eventually(
        () => kvEntry(nc, x.execution_id),
        (e) => e === null,
        TTL_MS * 4,
        100,
      );
    // ...and meanwhile the orchestrator gives one of them up (its reconciler marks the session FAILED).
    orch.decide = (req) => (req.execution_id === givenUp.execution_id ? { admitted: false, reason: 'session is FAILED' } : { admitted: true, reason: null });
    // Reads queued during the stall are answered after it, and must still find the executions.
    const queuedGet = request(nc, Life.get, { execution_id: kept.execution_id, task_id: kept.task_id }, { timeoutMs: 15_000 });
    const queuedList = request(nc, Life.list, { task_id: kept.task_id }, { timeoutMs: 15_000 });
    await nc.flush();
    child.kill('SIGCONT');
    const resumedAt = performance.now();
    expect((await queuedGet)?.execution_id).toBe(kept.execution_id);
    expect((await queuedList).map((e) => e.execution_id)).toEqual([kept.execution_id]);

    // The one still wanted is registered again and keeps running.
    await eventually(
      () => kvEntry(nc, kept.execution_id),
      (e) => e !== null,
      10_000,
      50,
    );
    // The one given up is stopped: its agent is gone and its stop is reported.
    const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === givenUp.execution_id, 20_000);
    expect(stopped.data.reason).toMatch(/^registry_lapsed/);
    await eventually(
      () => processGone(givenUp.pid!) && processGone(givenUp.agentctl_pid!),
      (g) => g,
      10_000,
      50,
    );
    const stoppedAfterMs = performance.now() - resumedAt;
    await eventually(
      () => kvEntry(nc, givenUp.execution_id),
      (e) => e === null,
      10_000,
      50,
    );

    expect(processGone(kept.pid!), logs.join('\n')).toBe(false);
    const readmissions = orch.admitted.slice(admissionsBefore).map((r) => r.execution_id);
    expect(readmissions).toContain(kept.execution_id);
    expect(readmissions).toContain(givenUp.execution_id);
    // The stated bound: refresh period + fence round trip + grace, with headroom for a busy machine.
    const bound = TTL_MS / 3 + 5_000 + GRACE_MS + 2_000;
    expect(stoppedAfterMs).toBeLessThan(bound);
    console.info(`[timing] given-up execution stopped ${stoppedAfterMs.toFixed(0)} ms after SIGCONT (bound ${bound} ms)`);
    // And the kept one survives further refreshes without another fence round trip.
    await new Promise((r) => setTimeout(r, TTL_MS));
    expect(await kvEntry(nc, kept.execution_id)).not.toBeNull();
  }, 90_000);

  it('frozen past the owner-silence bound: agentctl stops every agent while the instance is still frozen; after SIGCONT the stops are reported and nothing is left registered', async () => {
    const silenceMs = 2 * TTL_MS;
    const { nc, events, logs, child, executions } = await stallWorld('life-frozen', { AGENT_OWNER_SILENCE_MS: String(silenceMs) });
    const frozenAt = performance.now();
    child.kill('SIGSTOP');
    try {
      // No heartbeat comes any more: each agentctl stops its agent and exits on its own, within the
      // bound plus agentctl's stop (its grace), with headroom for a busy machine.
      for (const x of executions)
        await eventually(
          () => processGone(x.pid!) && processGone(x.agentctl_pid!),
          (g) => g,
          silenceMs + 15_000,
          50,
        );
      const goneAfterMs = performance.now() - frozenAt;
      // Not before the bound: agentctl counts the silence from the last heartbeat it got, which came
      // up to one refresh period (TTL / 3) before the SIGSTOP.
      expect(goneAfterMs).toBeGreaterThanOrEqual(silenceMs - TTL_MS / 3 - 100);
      console.info(`[timing] agents of a frozen instance gone ${goneAfterMs.toFixed(0)} ms after SIGSTOP (bound ${silenceMs} ms + stop)`);
    } finally {
      child.kill('SIGCONT');
    }
    // The instance learns its agentctls exited and reports each execution stopped, and unregisters it.
    for (const x of executions) {
      const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id, 20_000);
      expect(stopped.data.reason, logs.join('\n')).toBe('agentctl_stopped_agent:owner_silent');
      await eventually(
        () => kvEntry(nc, x.execution_id),
        (e) => e === null,
        10_000,
        50,
      );
    }
  }, 90_000);
});
