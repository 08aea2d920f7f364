import { Buckets } from '@kandev/contracts';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection, RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { randomUUID } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childProcesses } from '@kandev/runtime/host';
import {
  EventLog,
  FakeOrchestrator,
  eventually,
  getExecution,
  launch,
  launchRequest,
  natsClient,
  processGone,
  promptAt,
  script,
  startLifecycle,
  stopAt,
  stopManyAt,
  tmpStateDir,
} from './helpers.js';
import { AUTOGROUPS, CPU_CGROUP, cpuCgroupOf, onHost, TEST_CPU_CGROUP } from '../../../vitest.host.js';
import { STOPPING_GROUP } from '../src/isolation/stopping-cpu.js';

describe('stop and teardown (R-2.6, R-2.8, R-6.3, B-2, B-4)', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let life: RunningService;
  let events: EventLog;
  let orchestrator: FakeOrchestrator;
  const stateDir = tmpStateDir();
  const stateFile = join(stateDir, 'lifecycle', 'life-a.json');
  const stateFileIds = () =>
    (JSON.parse(readFileSync(stateFile, 'utf8')) as { executions: Array<{ execution_id: string }> }).executions.map((e) => e.execution_id);

  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'stop-test');
    orchestrator = await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
    // A grace long enough for a graceful exit on a busy machine, where a stopping agent runs at the
    // agents' priority (ADR 0043): a 500 ms grace once ended in SIGKILL in CI. A grace is a bound,
    // so it costs nothing when the agent exits at once.
    life = await startLifecycle(nats.url, 'life-a', stateDir, { TEARDOWN_GRACE_MS: '5000', SHUTDOWN_TIMEOUT_MS: '9000' });
  });
  afterAll(async () => {
    await life?.stop();
    await nc?.close();
    await nats?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it('an agent ignoring SIGTERM is SIGKILLed after a 300 ms grace: how killed, both processes gone, key deleted', async () => {
    const exec = await launch(nc, launchRequest());
    const turnId = randomUUID();
    await promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: turnId, prompt: script([{ sleep_ms: 30_000 }], { ignore_sigterm: true }) });
    await events.waitFor('turn.started', (e) => e.data.turn_id === turnId);
    expect(stateFileIds()).toContain(exec.execution_id);

    const t0 = performance.now();
    const accepted = await stopAt(nc, 'life-a', { execution_id: exec.execution_id, reason: 'operator_stop', grace_ms: 300 });
    const acceptMs = performance.now() - t0;
    expect(accepted).toEqual({ accepted: true, execution_id: exec.execution_id, already_gone: false });
    // Accepted at once; teardown runs behind the reply.
    expect(acceptMs).toBeLessThan(1_000);
    expect(await getExecution(nc, exec.execution_id)).toMatchObject({ status: 'STOPPING' });

    const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === exec.execution_id);
    console.info(`[timing] stop (ignore_sigterm, grace 300): accepted ${acceptMs.toFixed(0)} ms, stopped event ${(performance.now() - t0).toFixed(0)} ms`);
    expect(stopped.data).toEqual({
      execution_id: exec.execution_id,
      how: 'killed',
      grace_ms: 300,
      reason: 'operator_stop',
      pid: exec.pid,
      exit_code: null,
      signal: 'SIGKILL',
      orphaned: false,
    });
    expect(stopped).toMatchObject({ task_id: exec.task_id, session_id: exec.session_id, workspace_id: exec.workspace_id });
    expect(() => process.kill(exec.pid!, 0)).toThrow();
    expect(() => process.kill(exec.agentctl_pid!, 0)).toThrow();
    await eventually(
      () => getExecution(nc, exec.execution_id),
      (e) => e === null,
      2_000,
    );
    // Removals are written to the state file together, a moment later.
    await eventually(stateFileIds, (ids) => !ids.includes(exec.execution_id));
    // The cancelled turn was closed before the agent went.
    expect(events.of('turn.completed', exec.execution_id).map((e) => e.data.stop_reason)).toEqual(['cancelled']);
  });

  // Where this host lets lifecycle make it, every stopping process goes into one cpu cgroup;
  // elsewhere each session's autogroup (what ranks a session where the kernel groups by session) is
  // lowered. With neither, a nice value is all there is, and there is nothing of this to see.
  const ranking = {
    feature: 'cpu-cgroup or autogroups',
    present: CPU_CGROUP.present || AUTOGROUPS.present,
    lacking: `${CPU_CGROUP.lacking}; ${AUTOGROUPS.lacking}`,
  };
  onHost(ranking)("an execution's processes drop below the control plane once it is being stopped, not before (ADR 0027, ADR 0043, ADR 0046)", async () => {
    const autogroupNice = (pid: number) => /nice (-?\d+)/.exec(readFileSync(`/proc/${pid}/autogroup`, 'utf8'))?.[1];
    const exec = await launch(nc, launchRequest());
    const group = TEST_CPU_CGROUP && join(TEST_CPU_CGROUP.path, STOPPING_GROUP);
    const lowered = (pid: number) => (group ? cpuCgroupOf(pid) === group : autogroupNice(pid) === '10');
    const turnId = randomUUID();
    await promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: turnId, prompt: script([{ sleep_ms: 30_000 }], { ignore_sigterm: true }) });
    await events.waitFor('turn.started', (e) => e.data.turn_id === turnId);
    // Running: both at the control plane's level, so agentctl relays a cancel and the agent
    // acknowledges it without waiting behind other work (ADR 0043).
    expect(lowered(exec.agentctl_pid!)).toBe(false);
    expect(lowered(exec.pid!)).toBe(false);

    await stopAt(nc, 'life-a', { execution_id: exec.execution_id, reason: 'operator_stop', grace_ms: 3_000 });
    // Stopping: the agent ignores SIGTERM for the grace, and both are already below the control plane.
    await eventually(
      () => processGone(exec.agentctl_pid!) || (lowered(exec.agentctl_pid!) && lowered(exec.pid!)),
      (done) => done,
      3_000,
    );
    expect(processGone(exec.agentctl_pid!), 'agentctl was still stopping its agent').toBe(false);
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === exec.execution_id);
  });

  it('an idle agent stops gracefully; concurrent stops join one teardown; a repeat is already_gone (R-2.6)', async () => {
    const exec = await launch(nc, launchRequest({ agent: 'scripted-codex' }));
    const [a, b] = await Promise.all([
      stopAt(nc, 'life-a', { execution_id: exec.execution_id, reason: 'task_stopped', orphaned: true }),
      stopAt(nc, 'life-a', { execution_id: exec.execution_id, reason: 'task_stopped_again' }),
    ]);
    expect(a.accepted && b.accepted).toBe(true);
    const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === exec.execution_id);
    expect(stopped.data).toMatchObject({ how: 'graceful', grace_ms: 5000, reason: 'task_stopped', orphaned: true, signal: 'SIGTERM' });
    await eventually(
      () => getExecution(nc, exec.execution_id),
      (e) => e === null,
      2_000,
    );
    expect(await stopAt(nc, 'life-a', { execution_id: exec.execution_id, reason: 'again' })).toEqual({
      accepted: false,
      execution_id: exec.execution_id,
      already_gone: true,
    });
    await new Promise((r) => setTimeout(r, 200));
    expect(events.of('execution.stopped', exec.execution_id)).toHaveLength(1);
    expect(processGone(exec.pid!)).toBe(true);
  });

  it('B-2/R-2.8: a stop naming an old or unknown execution leaves the current one running', async () => {
    const req = launchRequest();
    const old = await launch(nc, req);
    await stopAt(nc, 'life-a', { execution_id: old.execution_id, reason: 'first stop' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === old.execution_id);
    // The session is relaunched: same task and session, new execution.
    const current = await launch(nc, { ...req, execution_id: randomUUID(), fence_epoch: 2 });

    expect(await stopAt(nc, 'life-a', { execution_id: old.execution_id, reason: 'stale stop' })).toEqual({
      accepted: false,
      execution_id: old.execution_id,
      already_gone: true,
    });
    const unknown = randomUUID();
    expect(await stopAt(nc, 'life-a', { execution_id: unknown, reason: 'stale stop' })).toEqual({ accepted: false, execution_id: unknown, already_gone: true });

    // A barrier instead of a sleep: a teardown started by a stale stop would mark the execution
    // STOPPING before this prompt (same instance, in order) and the prompt would be refused.
    const turnId = randomUUID();
    await promptAt(nc, 'life-a', { execution_id: current.execution_id, turn_id: turnId, prompt: 'alive?' });
    await events.waitFor('turn.completed', (e) => e.data.turn_id === turnId);
    expect(processGone(current.pid!)).toBe(false);
    expect(events.of('execution.stopped', current.execution_id)).toHaveLength(0);
    expect(await getExecution(nc, current.execution_id)).toMatchObject({ status: 'READY', execution_id: current.execution_id });

    await stopAt(nc, 'life-a', { execution_id: current.execution_id, reason: 'test_done' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === current.execution_id);
  });

  it('an agent that dies on its own is reported as exited and unregistered', async () => {
    const exec = await launch(nc, launchRequest());
    process.kill(exec.pid!, 'SIGKILL');
    const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === exec.execution_id);
    expect(stopped.data).toMatchObject({ how: 'exited', reason: 'agent_exited', signal: 'SIGKILL', grace_ms: null, pid: exec.pid });
    await eventually(
      () => getExecution(nc, exec.execution_id),
      (e) => e === null,
      2_000,
    );
    expect(processGone(exec.agentctl_pid!)).toBe(true);
  });

  it('agentctl dying leaves no agent behind: lifecycle signals the agent itself (R-6.1, B-4)', async () => {
    const exec = await launch(nc, launchRequest());
    process.kill(exec.agentctl_pid!, 'SIGKILL');
    const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === exec.execution_id);
    // It died: reported as killed, not as a graceful stop.
    expect(stopped.data).toMatchObject({ reason: 'agentctl_exited', pid: exec.pid, how: 'killed' });
    expect(processGone(exec.pid!)).toBe(true);
    await eventually(
      () => getExecution(nc, exec.execution_id),
      (e) => e === null,
      2_000,
    );
  });

  it('stop_many: several executions in one request, each answered as a stop, in order; every one torn down', async () => {
    const [a, b] = await Promise.all([launch(nc, launchRequest()), launch(nc, launchRequest())]);
    const unknown = randomUUID();
    const { results } = await stopManyAt(nc, 'life-a', {
      stops: [
        { execution_id: a.execution_id, reason: 'tree_paused', grace_ms: 5_000 },
        { execution_id: unknown, reason: 'tree_paused' },
        { execution_id: b.execution_id, reason: 'tree_paused', grace_ms: 5_000, orphaned: true },
      ],
    });
    expect(results).toEqual([
      { accepted: true, execution_id: a.execution_id, already_gone: false },
      { accepted: false, execution_id: unknown, already_gone: true },
      { accepted: true, execution_id: b.execution_id, already_gone: false },
    ]);
    for (const [x, orphaned] of [
      [a, false],
      [b, true],
    ] as const) {
      const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id);
      expect(stopped.data).toMatchObject({ reason: 'tree_paused', grace_ms: 5_000, orphaned, how: 'graceful' });
      expect(processGone(x.pid!)).toBe(true);
      expect(processGone(x.agentctl_pid!)).toBe(true);
      await eventually(
        () => getExecution(nc, x.execution_id),
        (e) => e === null,
        2_000,
      );
    }
  });

  it('launch vs stop: a stop that lands while the agent is still starting wins, and nothing is left running', async () => {
    const req = launchRequest({ prompt: 'must never run', turn_id: randomUUID() });
    const launching = launch(nc, req);
    const starting = await eventually(
      () => getExecution(nc, req.execution_id),
      (e) => e?.status === 'STARTING',
      10_000,
      10,
    );
    expect(starting).toMatchObject({ pid: null, agentctl_url: null });
    // The agent may already be spawned although its pid is not reported yet.
    const agentsSoFar = await eventually(
      () => childProcesses(starting!.agentctl_pid!),
      (l) => l.length > 0,
      5_000,
      5,
    ).catch(() => []);
    expect(await stopAt(nc, 'life-a', { execution_id: req.execution_id, reason: 'stopped while starting', grace_ms: 500 })).toMatchObject({ accepted: true });
    await expect(launching).rejects.toMatchObject({ code: 'CONFLICT', message: 'execution was stopped while launching' });
    const stopped = events.of('execution.stopped', req.execution_id);
    expect(stopped.map((e) => e.data.reason)).toEqual(['stopped while starting']);
    expect(processGone(starting!.agentctl_pid!)).toBe(true);
    for (const a of agentsSoFar) expect(processGone(a.pid)).toBe(true);
    expect(events.of('turn.started', req.execution_id)).toHaveLength(0);
    expect(events.of('execution.ready', req.execution_id)).toHaveLength(0);
    expect(await getExecution(nc, req.execution_id)).toBeNull();
    await eventually(stateFileIds, (ids) => !ids.includes(req.execution_id));
  });

  it('launch vs stop: a stop that lands during admission wins before the first prompt reaches the agent', async () => {
    const req = launchRequest({ prompt: script([{ say: 'must never run' }]), turn_id: randomUUID() });
    let admit!: () => void;
    const usual = orchestrator.decide;
    orchestrator.decide = (a) => (a.execution_id === req.execution_id ? new Promise((r) => (admit = () => r({ admitted: true, reason: null }))) : usual(a));
    try {
      const launching = launch(nc, req);
      await eventually(
        () => orchestrator.admitted.some((a) => a.execution_id === req.execution_id),
        (asked) => asked,
        10_000,
        10,
      );
      const ready = (await getExecution(nc, req.execution_id))!;
      expect(ready.status).toBe('READY');
      expect(await stopAt(nc, 'life-a', { execution_id: req.execution_id, reason: 'stopped during admission', grace_ms: 500 })).toMatchObject({
        accepted: true,
      });
      await eventually(
        () => getExecution(nc, req.execution_id),
        (e) => e === null || e.status === 'STOPPING',
        5_000,
        10,
      );
      admit();
      await expect(launching).rejects.toMatchObject({ code: 'CONFLICT', message: 'execution was stopped while launching' });
      const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === req.execution_id);
      expect(stopped.data.reason).toBe('stopped during admission');
      expect(events.of('execution.stopped', req.execution_id)).toHaveLength(1);
      expect(events.of('turn.started', req.execution_id)).toHaveLength(0);
      expect(events.of('execution.ready', req.execution_id)).toHaveLength(0);
      expect(processGone(ready.pid!)).toBe(true);
      expect(processGone(ready.agentctl_pid!)).toBe(true);
    } finally {
      orchestrator.decide = usual;
    }
  });
});

describe('service shutdown', () => {
  // A service of its own: this test stops it, and the other tests may run in any order.
  let nats: TestNats;
  let nc: NatsConnection;
  let life: RunningService;
  let events: EventLog;
  const stateDir = tmpStateDir();
  const stateFile = join(stateDir, 'lifecycle', 'life-s.json');
  const stateFileIds = () =>
    (JSON.parse(readFileSync(stateFile, 'utf8')) as { executions: Array<{ execution_id: string }> }).executions.map((e) => e.execution_id);

  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'shutdown-test');
    await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
    life = await startLifecycle(nats.url, 'life-s', stateDir, { TEARDOWN_GRACE_MS: '5000', SHUTDOWN_TIMEOUT_MS: '9000' });
  });
  afterAll(async () => {
    await life?.stop();
    await nc?.close();
    await nats?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it('service shutdown tears down the instance executions, so nothing lingers', async () => {
    const execs = await Promise.all([launch(nc, launchRequest()), launch(nc, launchRequest({ agent: 'scripted-codex' }))]);
    const busy = randomUUID();
    await promptAt(nc, 'life-s', { execution_id: execs[0].execution_id, turn_id: busy, prompt: script([{ sleep_ms: 30_000 }]) });
    await events.waitFor('turn.started', (e) => e.data.turn_id === busy);
    const registry = await new Kvm(nc).open(Buckets.executions);
    const t0 = performance.now();
    await life.stop();
    console.info(`[timing] service shutdown with 2 executions: ${(performance.now() - t0).toFixed(0)} ms`);
    for (const x of execs) {
      const stopped = events.of('execution.stopped', x.execution_id);
      expect(stopped.map((e) => e.data.reason)).toEqual(['lifecycle_shutdown']);
      expect(processGone(x.pid!)).toBe(true);
      expect(processGone(x.agentctl_pid!)).toBe(true);
      // The service is gone, so read the bucket directly.
      const entry = await registry.get(x.execution_id);
      expect(entry === null || entry.operation !== 'PUT').toBe(true);
    }
    expect(stateFileIds()).toEqual([]);
  });
});
