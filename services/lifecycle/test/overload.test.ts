// Overload: one instance starts at most LAUNCH_CONCURRENCY agents at a time; the rest
// wait a bounded time in its queue or are refused at once with UNAVAILABLE and a retry-after hint.
// Every request is answered well within its caller's timeout, by a start or a refusal.
import { isKandevError, type Execution } from '@kandev/contracts';
import { startNats, type TestNats } from '@kandev/testkit';
import type { NatsConnection, RunningService } from '@kandev/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admitLaunch, admitReservedLaunch, nextTypicalLaunchMs } from '../src/domain/admission.js';
import { LaunchGate } from '../src/launch-gate.js';
import { FakeOrchestrator, launch, launchRequest, natsClient, processGone, startLifecycle, tmpStateDir } from './helpers.js';

describe('launch admission (pure)', () => {
  const limits = { concurrency: 2, maxWaitMs: 5_000 };
  it('starts while there is room, queues what fits in the wait bound, refuses the rest at once', () => {
    expect(admitLaunch({ running: 1, waiting: 0, typicalLaunchMs: 1_000 }, limits)).toEqual({ kind: 'start' });
    expect(admitLaunch({ running: 2, waiting: 0, typicalLaunchMs: 1_000 }, limits)).toEqual({ kind: 'wait' });
    // 9 ahead + this one = 5 waves of 1 s: just fits.
    expect(admitLaunch({ running: 2, waiting: 9, typicalLaunchMs: 1_000 }, limits)).toEqual({ kind: 'wait' });
    expect(admitLaunch({ running: 2, waiting: 10, typicalLaunchMs: 1_000 }, limits)).toEqual({ kind: 'refuse', retryAfterMs: 6_000 });
    // Nobody jumps the queue: a free slot with waiters means wait.
    expect(admitLaunch({ running: 1, waiting: 1, typicalLaunchMs: 1_000 }, limits).kind).toBe('wait');
    expect(nextTypicalLaunchMs(1_000, 2_000)).toBe(1_300);
  });

  it('counts reservations (ADR 0026): they take free slots first and queue like waiters', () => {
    // One free slot, one reservation coming for it: a new launch waits behind it.
    expect(admitLaunch({ running: 1, waiting: 0, reserved: 1, typicalLaunchMs: 1_000 }, limits).kind).toBe('wait');
    expect(admitLaunch({ running: 0, waiting: 0, reserved: 1, typicalLaunchMs: 1_000 }, limits).kind).toBe('start');
    // Full, 9 reserved beyond the slots = 9 ahead: fits; 10 ahead: refused, as with waiters.
    expect(admitLaunch({ running: 2, waiting: 0, reserved: 9, typicalLaunchMs: 1_000 }, limits).kind).toBe('wait');
    expect(admitLaunch({ running: 2, waiting: 4, reserved: 6, typicalLaunchMs: 1_000 }, limits)).toEqual({ kind: 'refuse', retryAfterMs: 6_000 });
    // A launch arriving with its reservation is never refused at once.
    expect(admitReservedLaunch({ running: 2, waiting: 50, typicalLaunchMs: 1_000 }, limits)).toEqual({ kind: 'wait' });
    expect(admitReservedLaunch({ running: 1, waiting: 0, typicalLaunchMs: 1_000 }, limits)).toEqual({ kind: 'start' });
  });

  it('LaunchGate.reserve refuses at once when the queue is predicted too long, and a reserved launch takes its place', async () => {
    const gate = new LaunchGate({ concurrency: 1, maxWaitMs: 2_500 }, 60_000);
    gate.reserve('a'); // start
    gate.reserve('b'); // 1 wave ahead: 2 s ≤ 2.5 s
    expect(() => gate.reserve('c')).toThrow(expect.objectContaining({ code: 'UNAVAILABLE', details: expect.objectContaining({ retry_after_s: 4 }) }));
    gate.reserve('a'); // idempotent
    expect(gate.state).toMatchObject({ running: 0, waiting: 0, reserved: 2 });
    const release = await gate.acquire('a');
    expect(gate.state).toMatchObject({ running: 1, reserved: 1 });
    const b = gate.acquire('b');
    expect(gate.state).toMatchObject({ running: 1, waiting: 1, reserved: 0 });
    release();
    (await b)();
    expect(gate.state).toMatchObject({ running: 0, waiting: 0, reserved: 0 });
  });
});

describe('launch admission under a burst', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let life: RunningService;
  // Long enough that the first wave ends inside it on a loaded 2-core machine (a wave of two cold
  // launches took over 5 s there beside other packages' tests), so later launches do start from the
  // queue; short enough that every refusal comes well inside the caller's 20 s.
  const WAIT_MS = 10_000;
  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'overload-test');
    await FakeOrchestrator.start(nc);
    life = await startLifecycle(nats.url, 'life-busy', tmpStateDir(), { LAUNCH_CONCURRENCY: '2', LAUNCH_QUEUE_WAIT_MS: String(WAIT_MS) });
  }, 60_000);
  afterAll(async () => {
    await life?.stop();
    await nc?.close();
    await nats?.stop();
  });

  it('answers every one of 20 concurrent launches with a start or a fast refusal carrying retry_after_s', async () => {
    const t0 = performance.now();
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, () =>
        launch(nc, launchRequest()).then(
          (x: Execution) => ({ ok: true as const, x, ms: performance.now() - t0 }),
          (e: unknown) => ({ ok: false as const, e, ms: performance.now() - t0 }),
        ),
      ),
    );
    const started = outcomes.filter((o) => o.ok);
    const refused = outcomes.filter((o) => !o.ok);
    // The first wave starts at once, later ones waited their turn in the queue.
    expect(started.length).toBeGreaterThan(2);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(isKandevError(r.e) && r.e.code === 'UNAVAILABLE', String(r.e)).toBe(true);
      const details = (r.e as { details?: { retry_after_s?: number } }).details;
      expect(details?.retry_after_s).toBeGreaterThanOrEqual(1);
    }
    // Nobody waited for the caller's timeout (20 s): refusals come within the queue bound plus slack.
    for (const r of refused) expect(r.ms).toBeLessThan(WAIT_MS + 5_000);
    for (const s of started) if (s.ok) expect(processGone(s.x.pid!)).toBe(false);
    console.info(
      `[overload] 20 launches, concurrency 2: ${started.length} started, ${refused.length} refused; slowest refusal ${Math.max(...refused.map((r) => r.ms)).toFixed(0)} ms, slowest start ${Math.max(...started.map((s) => s.ms)).toFixed(0)} ms`,
    );
  }, 60_000);
});
