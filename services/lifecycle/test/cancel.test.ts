import type { NatsConnection, RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EventLog,
  FakeOrchestrator,
  cancelAt,
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
  tmpStateDir,
} from './helpers.js';

const CANCEL_TIMEOUT_MS = 1500;
/** Longer than the time the agent got to acknowledge: the teardown's grace does not add to it. */
const GRACE_MS = 2000;

describe('turn cancel (R-3, B-2)', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let life: RunningService;
  let events: EventLog;
  const stateDir = tmpStateDir();

  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'cancel-test');
    await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
    life = await startLifecycle(nats.url, 'life-a', stateDir, { CANCEL_TIMEOUT_MS: String(CANCEL_TIMEOUT_MS), TEARDOWN_GRACE_MS: String(GRACE_MS) });
  });
  afterAll(async () => {
    await life?.stop();
    await nc?.close();
    await nats?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  async function runningTurn(agent: 'scripted-acp' | 'scripted-codex', prompt: string) {
    const exec = await launch(nc, launchRequest({ agent }));
    const turnId = randomUUID();
    await promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: turnId, prompt });
    await events.waitFor('turn.started', (e) => e.data.turn_id === turnId);
    return { exec, turnId };
  }

  it.each(['scripted-acp', 'scripted-codex'] as const)(
    '%s: cancels a sleeping turn without killing the agent; READY, turn.completed cancelled, new prompt accepted',
    async (agent) => {
      const { exec, turnId } = await runningTurn(agent, script([{ sleep_ms: 20_000 }]));
      const t0 = performance.now();
      const res = await cancelAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: turnId });
      const cancelMs = performance.now() - t0;
      console.info(`[timing] cancel ${agent}: ${cancelMs.toFixed(0)} ms`);
      expect(res).toEqual({ cancelled: true, turn_id: turnId, stop_reason: 'cancelled', reason: null });

      // By the time the reply arrives the registry says READY; the turn's events follow it
      // (queued in the journal, which syncs and publishes them after the reply has gone).
      expect(await getExecution(nc, exec.execution_id)).toMatchObject({ status: 'READY', turn_id: null });
      const completed = await events.waitFor('turn.completed', (e) => e.data.execution_id === exec.execution_id);
      expect(completed.data).toEqual({ execution_id: exec.execution_id, turn_id: turnId, stop_reason: 'cancelled' });
      expect(completed).toMatchObject({ task_id: exec.task_id, session_id: exec.session_id, workspace_id: exec.workspace_id });
      expect(processGone(exec.pid!)).toBe(false);

      // agentctl's own turn_completed line arrives too; it must not produce a second event. agentctl's
      // lines are relayed in order, so once the next turn's completion is out, that line was handled.
      const next = randomUUID();
      await promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: next, prompt: 'still there?' });
      expect((await events.waitFor('turn.completed', (e) => e.data.turn_id === next)).data.stop_reason).toBe('end_turn');
      expect(events.of('turn.completed', exec.execution_id).map((e) => e.data.turn_id)).toEqual([turnId, next]);
      // session.agent.cancelled is the orchestrator's, published with the writes that record the cancel.
      expect(events.of('session.agent.cancelled', exec.execution_id)).toHaveLength(0);

      // Nothing in flight now: cancel is a successful no-op.
      expect(await cancelAt(nc, 'life-a', { execution_id: exec.execution_id })).toEqual({
        cancelled: false,
        turn_id: null,
        stop_reason: null,
        reason: 'no_active_turn',
      });
      await stopAt(nc, 'life-a', { execution_id: exec.execution_id, reason: 'test_done' });
      await events.waitFor('execution.stopped', (e) => e.data.execution_id === exec.execution_id);
    },
  );

  it('B-2: a cancel naming an old turn is CONFLICT and the current turn keeps running', async () => {
    const exec = await launch(nc, launchRequest());
    const oldTurn = randomUUID();
    await promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: oldTurn, prompt: 'first' });
    await events.waitFor('turn.completed', (e) => e.data.turn_id === oldTurn);
    const current = randomUUID();
    await promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: current, prompt: script([{ sleep_ms: 1200 }, { say: 'finished anyway' }]) });
    await events.waitFor('turn.started', (e) => e.data.turn_id === current);

    await expect(cancelAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: oldTurn })).rejects.toMatchObject({
      code: 'CONFLICT',
      details: { turn_id: current, requested_turn_id: oldTurn },
    });
    expect(await getExecution(nc, exec.execution_id)).toMatchObject({ status: 'RUNNING', turn_id: current });
    const done = await events.waitFor('turn.completed', (e) => e.data.turn_id === current);
    expect(done.data.stop_reason).toBe('end_turn');
    expect(events.of('session.agent.cancelled', exec.execution_id)).toHaveLength(0);

    // A cancel for an execution this instance does not own is NOT_FOUND, and touches nothing.
    await expect(cancelAt(nc, 'life-a', { execution_id: randomUUID() })).rejects.toMatchObject({ code: 'NOT_FOUND' });
    await stopAt(nc, 'life-a', { execution_id: exec.execution_id, reason: 'test_done' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === exec.execution_id);
  });

  it('an agent ignoring cancel (and SIGTERM): CONFLICT naming the escalation within about the cancel timeout, then SIGKILL within the grace + 1 s of that answer (R-3.4, R-10.5)', async () => {
    const { exec, turnId } = await runningTurn('scripted-acp', script([{ sleep_ms: 60_000 }], { ignore_cancel: true, ignore_sigterm: true }));
    const t0 = performance.now();
    await expect(cancelAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: turnId })).rejects.toMatchObject({
      code: 'CONFLICT',
      message: expect.stringContaining('being torn down'),
      details: { escalation: 'teardown', reason: 'cancel_unacknowledged', execution_id: exec.execution_id, turn_id: turnId, grace_ms: GRACE_MS },
    });
    const unackMs = performance.now() - t0;
    // The answer is the logical end of the agent: from it, the grace (one deadline) and 1 s at most.
    const gone = await eventually(
      () => (processGone(exec.pid!) ? performance.now() : null),
      (t) => t !== null,
      GRACE_MS + 10_000,
      10,
    );
    const killMs = gone! - t0 - unackMs;
    console.info(`[timing] stubborn agent gone ${killMs.toFixed(0)} ms after the unacknowledged cancel's answer (grace ${GRACE_MS} ms)`);
    expect(killMs).toBeLessThan(GRACE_MS + 1_000);
    console.info(`[timing] unacknowledged cancel answered after ${unackMs.toFixed(0)} ms (cancel timeout ${CANCEL_TIMEOUT_MS} ms)`);
    expect(unackMs).toBeGreaterThanOrEqual(CANCEL_TIMEOUT_MS - 100);
    expect(unackMs).toBeLessThan(CANCEL_TIMEOUT_MS + 3_000);

    const stopped = await events.waitFor('execution.stopped', (e) => e.data.execution_id === exec.execution_id);
    console.info(`[timing] escalation stopped the execution ${(performance.now() - t0).toFixed(0)} ms after the cancel`);
    expect(stopped.data).toMatchObject({ reason: 'cancel_unacknowledged', how: 'killed', grace_ms: GRACE_MS, pid: exec.pid });
    expect(processGone(exec.pid!)).toBe(true);
    expect(processGone(exec.agentctl_pid!)).toBe(true);
    // The key goes right after the event (deleted once execution.stopped is out).
    await eventually(
      () => getExecution(nc, exec.execution_id),
      (e) => e === null,
      2_000,
    );
    // The stuck turn is closed, so the orchestrator never waits on it.
    await eventually(
      () => events.of('turn.completed', exec.execution_id),
      (l) => l.length === 1,
      5_000,
    );
  });
});
