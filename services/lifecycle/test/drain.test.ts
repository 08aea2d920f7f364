// The per-instance execution cap (MAX_EXECUTIONS) and the drain (Life.drain) on one lifecycle
// instance; the rollout with two instances and the orchestrator is e2e/test/lifecycle-drain.test.ts.
import { DrainReport, Life, isKandevError, type Execution } from '@kandev/contracts';
import { request, type NatsConnection, type RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admitUnderCap, drainOutcome, heldExecutions } from '../src/domain/drain.js';
import { FakeOrchestrator, eventually, launch, launchRequest, natsClient, processGone, script, startLifecycle, stopAt, tmpStateDir } from './helpers.js';

describe('cap and drain (pure)', () => {
  it('admits under the cap, refuses at it with a retry hint; 0 = no cap', () => {
    expect(admitUnderCap(1, 2)).toEqual({ kind: 'admit' });
    expect(admitUnderCap(2, 2)).toEqual({ kind: 'refuse', retryAfterMs: 5_000 });
    expect(admitUnderCap(1_000, 0)).toEqual({ kind: 'admit' });
  });

  it('counts an execution that is both live and launching once', () => {
    expect(heldExecutions(['a', 'b'], ['b', 'c']).size).toBe(3);
  });

  it('sorts what a drain saw into finished, to stop and left by mode', () => {
    const before = new Set(['a', 'b', 'c']);
    const remaining = new Set(['b', 'c']);
    expect(drainOutcome(before, remaining, 'stop')).toEqual({ finished: ['a'], toStop: ['b', 'c'], left: [] });
    expect(drainOutcome(before, remaining, 'wait')).toEqual({ finished: ['a'], toStop: [], left: ['b', 'c'] });
  });
});

describe('one instance at its cap, then drained', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let life: RunningService;
  const INSTANCE = 'life-drain';
  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'drain-test');
    await FakeOrchestrator.start(nc);
    life = await startLifecycle(nats.url, INSTANCE, tmpStateDir(), { MAX_EXECUTIONS: '2' });
  }, 60_000);
  afterAll(async () => {
    await life?.stop();
    await nc?.close();
    await nats?.stop();
  });

  const longTurn = () => launchRequest({ prompt: script([{ sleep_ms: 120_000 }]), turn_id: crypto.randomUUID() });
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => null,
      (e: unknown) => (isKandevError(e) ? e : null),
    );

  it('refuses a launch and a reservation beyond MAX_EXECUTIONS (reservations counted); a wait-mode drain reports what finished and what is left, and takes no launch after', async () => {
    // Places reserved for launches on their way (ADR 0026) count against the cap.
    const reserve = (id: string) => request(nc, Life.reserveLaunch, { execution_id: id }, { timeoutMs: 5_000 });
    const [ra, rb] = [longTurn(), longTurn()];
    await reserve(ra.execution_id);
    await reserve(rb.execution_id);
    expect((await refusal(reserve(crypto.randomUUID())))?.code).toBe('UNAVAILABLE');
    expect((await refusal(launch(nc, longTurn())))?.details).toMatchObject({ max_executions: 2 });
    // The reserved launches take their places.
    const a: Execution = await launch(nc, ra);
    const b: Execution = await launch(nc, rb);
    const third = await refusal(launch(nc, longTurn()));
    expect(third?.code).toBe('UNAVAILABLE');
    expect(third?.details).toMatchObject({ max_executions: 2, instance_id: INSTANCE });
    expect(third?.details?.retry_after_s).toBeGreaterThanOrEqual(1);
    expect((await refusal(reserve(crypto.randomUUID())))?.code).toBe('UNAVAILABLE');

    const drain = request(nc, Life.drain.at(INSTANCE), { mode: 'wait', wait_ms: 5_000 }, { timeoutMs: 30_000 });
    // Not ready at once; one execution ends (its stop) while the drain waits.
    await eventually(
      async () => (await fetch(`${life.healthUrl}/readyz`)).status,
      (status) => status === 503,
    );
    await stopAt(nc, INSTANCE, { execution_id: a.execution_id, reason: 'operator stop', grace_ms: 500 });
    const report = DrainReport.parse(await drain);
    expect(report).toMatchObject({ instance_id: INSTANCE, mode: 'wait', finished: [a.execution_id], stopped: [], left: [b.execution_id] });
    expect(processGone(b.pid!)).toBe(false);

    // The launch subscriptions are gone: with no other instance, a launch finds nobody to take it.
    const after = await refusal(launch(nc, longTurn()));
    expect(after?.code).toBe('UNAVAILABLE');
    // A second drain joins the first.
    expect(await request(nc, Life.drain.at(INSTANCE), { mode: 'stop', wait_ms: 0 }, { timeoutMs: 10_000 })).toEqual(report);
  }, 90_000);
});
