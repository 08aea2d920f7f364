import { Execution } from '@kandev/contracts';
import type { NatsConnection, RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EventLog,
  FakeOrchestrator,
  getExecution,
  launch,
  launchRequest,
  listExecutions,
  natsClient,
  processGone,
  promptAt,
  requestsAnsweredBy,
  script,
  startLifecycle,
  stopAt,
  tmpStateDir,
} from './helpers.js';

describe('launch, registry and prompts', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let lifeA: RunningService;
  let lifeB: RunningService | undefined;
  let orch: FakeOrchestrator;
  let events: EventLog;
  const stateDir = tmpStateDir();

  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'launch-test');
    orch = await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
    lifeA = await startLifecycle(nats.url, 'life-a', stateDir);
  });
  afterAll(async () => {
    await lifeB?.stop();
    await lifeA?.stop();
    await nc?.close();
    await nats?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it.each(['scripted-acp', 'scripted-codex'] as const)('launches %s, registers it, and any instance lists it (R-6.2)', async (agent) => {
    const req = launchRequest({ agent, fence_epoch: 7 });
    const t0 = performance.now();
    const exec = await launch(nc, req);
    const launchMs = performance.now() - t0;
    console.info(`[timing] launch ${agent}: ${launchMs.toFixed(0)} ms`);

    expect(Execution.parse(exec)).toMatchObject({
      execution_id: req.execution_id,
      task_id: req.task_id,
      session_id: req.session_id,
      workspace_id: req.workspace_id,
      instance_id: 'life-a',
      protocol: agent === 'scripted-acp' ? 'acp' : 'codex',
      status: 'READY',
      fence_epoch: 7,
      turn_id: null,
    });
    expect(exec.pid).toBeGreaterThan(0);
    expect(exec.agentctl_pid).toBeGreaterThan(0);
    expect(exec.agentctl_url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(processGone(exec.pid!)).toBe(false);
    // B-1: the fence was asked with the request's epoch, after the entry was registered.
    expect(orch.admitted.find((a) => a.execution_id === req.execution_id)).toEqual({
      execution_id: req.execution_id,
      task_id: req.task_id,
      session_id: req.session_id,
      fence_epoch: 7,
      instance_id: 'life-a',
    });
    const registered = await events.waitFor('execution.registered', (e) => e.data.execution.execution_id === req.execution_id);
    expect(registered).toMatchObject({ workspace_id: req.workspace_id, task_id: req.task_id, session_id: req.session_id });
    await events.waitFor('execution.ready', (e) => e.data.execution.execution_id === req.execution_id);

    // A second instance that owns nothing answers from the registry too. It only lives for this
    // check: with two instances in the queue group, later launches could land on either.
    lifeB = await startLifecycle(nats.url, 'life-b', stateDir);
    for (let i = 0; i < 30; i++) {
      const listed = await listExecutions(nc, req.task_id);
      expect(listed.map((e) => e.execution_id)).toEqual([req.execution_id]);
      expect(listed[0]).toMatchObject({ instance_id: 'life-a', status: 'READY' });
    }
    const answered = await requestsAnsweredBy(nc, 'life_exec_list');
    expect(answered['life-b']).toBeGreaterThan(0);
    expect(await getExecution(nc, req.execution_id)).toMatchObject({ execution_id: req.execution_id, instance_id: 'life-a' });
    expect(await listExecutions(nc, randomUUID())).toEqual([]);
    expect(await getExecution(nc, randomUUID())).toBeNull();
    await lifeB.stop();
    lifeB = undefined;

    await stopAt(nc, 'life-a', { execution_id: req.execution_id, reason: 'test_done' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === req.execution_id);
  });

  it('relays a prompt turn: turn.started, agent.message, usage.recorded, turn.completed; status back to READY', async () => {
    const req = launchRequest({ agent: 'scripted-codex' });
    const exec = await launch(nc, req);
    const turnId = randomUUID();
    // The turn outlasts the second prompt below with headroom for a busy runner (300 ms did not:
    // the turn had ended before the second prompt arrived).
    const prompt = script([{ say: 'hello from codex' }, { usage: { cost_cents: 3, tokens_in: 10, tokens_cached_in: 2, tokens_out: 5 } }, { sleep_ms: 2000 }]);
    await expect(promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: turnId, prompt })).resolves.toEqual({ turn_id: turnId });
    // In flight: a second prompt is refused and the registry says RUNNING.
    await expect(promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: randomUUID(), prompt: 'again' })).rejects.toMatchObject({
      code: 'CONFLICT',
    });
    expect(await getExecution(nc, exec.execution_id)).toMatchObject({ status: 'RUNNING', turn_id: turnId });

    const started = await events.waitFor('turn.started', (e) => e.data.turn_id === turnId);
    expect(started).toMatchObject({
      task_id: req.task_id,
      session_id: req.session_id,
      workspace_id: req.workspace_id,
      data: { execution_id: exec.execution_id },
    });
    const completed = await events.waitFor('turn.completed', (e) => e.data.turn_id === turnId);
    expect(completed.data).toEqual({ execution_id: exec.execution_id, turn_id: turnId, stop_reason: 'end_turn' });
    const said = events
      .of('agent.message', exec.execution_id)
      .map((e) => e.data.text)
      .join('');
    expect(said).toContain('hello from codex');
    const usage = events.of('usage.recorded', exec.execution_id);
    expect(usage).toHaveLength(1);
    expect(usage[0]!.data).toMatchObject({ cost_cents: 3, tokens_in: 10, tokens_cached_in: 2, tokens_out: 5 });
    expect(events.of('session.agent.cancelled', exec.execution_id)).toHaveLength(0);
    expect(await getExecution(nc, exec.execution_id)).toMatchObject({ status: 'READY', turn_id: null });

    // A launch with a first prompt runs it once admitted.
    const withPrompt = launchRequest({ prompt: 'echo me', turn_id: randomUUID() });
    await launch(nc, withPrompt);
    const echoed = await events.waitFor('turn.completed', (e) => e.data.turn_id === withPrompt.turn_id);
    expect(echoed.data.stop_reason).toBe('end_turn');

    for (const id of [exec.execution_id, withPrompt.execution_id]) await stopAt(nc, 'life-a', { execution_id: id, reason: 'test_done' });
    for (const id of [exec.execution_id, withPrompt.execution_id]) await events.waitFor('execution.stopped', (e) => e.data.execution_id === id);
  });

  it('prompting an execution this instance does not own is NOT_FOUND', async () => {
    await expect(promptAt(nc, 'life-a', { execution_id: randomUUID(), turn_id: randomUUID(), prompt: 'hi' })).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });

  it('B-1: a launch the fence refuses is torn down before the reply, and its process is gone', async () => {
    orch.decide = (r) => (r.fence_epoch < 5 ? { admitted: false, reason: 'task stopped at epoch 5' } : { admitted: true, reason: null });
    try {
      const req = launchRequest({ fence_epoch: 4, prompt: 'must never run', turn_id: randomUUID() });
      await expect(launch(nc, req)).rejects.toMatchObject({ code: 'CONFLICT', message: 'launch fenced: task stopped at epoch 5' });
      const registered = await events.waitFor('execution.registered', (e) => e.data.execution.execution_id === req.execution_id);
      const pid = registered.data.execution.pid!;
      const agentctlPid = registered.data.execution.agentctl_pid!;
      expect(processGone(pid)).toBe(true);
      expect(processGone(agentctlPid)).toBe(true);
      const stopped = events.of('execution.stopped', req.execution_id);
      expect(stopped).toHaveLength(1);
      expect(stopped[0]!.data.reason).toBe('launch fenced: task stopped at epoch 5');
      expect(events.of('turn.started', req.execution_id)).toHaveLength(0);
      expect(events.of('execution.ready', req.execution_id)).toHaveLength(0);
      expect(await getExecution(nc, req.execution_id)).toBeNull();
    } finally {
      orch.decide = () => ({ admitted: true, reason: null });
    }
  });

  it('B-1: an unreachable orchestrator fences the launch too', async () => {
    const lonelyNats = await startNats();
    const lonelyNc = await natsClient(lonelyNats.url, 'lonely');
    const lonely = await startLifecycle(lonelyNats.url, 'life-lonely', stateDir, { REQUEST_TIMEOUT_MS: '500' });
    try {
      const lonelyEvents = new EventLog(lonelyNc);
      const req = launchRequest();
      await expect(launch(lonelyNc, req)).rejects.toMatchObject({
        code: 'CONFLICT',
        message: expect.stringMatching(/^launch fenced: orchestrator unreachable/),
      });
      const registered = await lonelyEvents.waitFor('execution.registered');
      expect(processGone(registered.data.execution.pid!)).toBe(true);
      expect(await getExecution(lonelyNc, req.execution_id)).toBeNull();
    } finally {
      await lonely.stop();
      await lonelyNc.close();
      await lonelyNats.stop();
    }
  });

  it('an unknown agent is a VALIDATION_ERROR and spawns nothing', async () => {
    const req = launchRequest({ agent: 'no-such-agent' });
    await expect(launch(nc, req)).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(await getExecution(nc, req.execution_id)).toBeNull();
  });

  it('a retried launch of a live execution answers with it instead of spawning a second agent', async () => {
    const req = launchRequest();
    const first = await launch(nc, req);
    const again = await launch(nc, req);
    expect(again.pid).toBe(first.pid);
    expect(again.agentctl_pid).toBe(first.agentctl_pid);
    await stopAt(nc, 'life-a', { execution_id: req.execution_id, reason: 'test_done' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === req.execution_id);
  });
});
