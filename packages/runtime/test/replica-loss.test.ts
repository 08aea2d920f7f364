import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Headers, type Endpoint } from '@kandev/contracts';
import { createInbox, headers as natsHeaders } from '@nats-io/nats-core';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, createLogger, on, request, serveEndpoints, type NatsConnection } from '../src/index.js';
import { HEARTBEAT_MS, InFlightReplies, RECEIPT_WAIT_MS, SILENCE_MS } from '../src/replies.js';

/**
 * A replica that dies must not cost a caller its whole deadline (ADR 0032). Two ways a request meets
 * a dead replica: it is routed to one the server still believes alive (killed an instant ago, or
 * frozen / partitioned with its TCP connection open), or the replica dies while running it.
 */
const work: Endpoint = { name: 'test.work', subject: 'kandev.test.work', request: z.object({ n: z.number().int() }), result: z.object({ n: z.number() }) };
const hang: Endpoint = { name: 'test.hang', subject: 'kandev.test.hang', request: z.object({}), result: z.object({}) };
const slow: Endpoint = { name: 'test.slow', subject: 'kandev.test.slow', request: z.object({ ms: z.number() }), result: z.object({ ok: z.boolean() }) };
const DEADLINE_MS = 30_000;

describe('requests to a replica that is gone', () => {
  let nats: TestNats;
  let caller: NatsConnection;
  let live: NatsConnection;
  const handled: number[] = [];
  const log = createLogger('test', 'silent');

  beforeAll(async () => {
    nats = await startNats();
    caller = await connectNats({ url: nats.url, name: 'caller' });
    live = await connectNats({ url: nats.url, name: 'live-replica' });
    await serveEndpoints(live, { service: 'orchestrator', instanceId: 'live', queue: 'q', log }, [
      on(work, async (req) => {
        handled.push((req as { n: number }).n);
        return { n: (req as { n: number }).n };
      }),
      on(slow, async (req) => {
        await new Promise((r) => setTimeout(r, (req as { ms: number }).ms));
        return { ok: true };
      }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([caller?.close(), live?.close()]);
    await nats?.stop();
  });

  it('sends again a request that reached a replica the server still believes alive, and it runs once', async () => {
    // The dead replica: a member of the same queue group that takes requests and never answers,
    // as a frozen process or a partitioned pod does until the server's ping timeout.
    const ghost = await connectNats({ url: nats.url, name: 'ghost-replica' });
    let swallowed = 0;
    ghost.subscribe(work.subject, { queue: 'q', callback: () => void swallowed++ });
    await ghost.flush();
    try {
      const ns = Array.from({ length: 12 }, (_, i) => i);
      const answers = await Promise.all(ns.map((n) => request(caller, work, { n }, { timeoutMs: DEADLINE_MS })));
      expect(answers).toEqual(ns.map((n) => ({ n })));
      // Some went to the ghost first (the queue group picks at random) and were sent again...
      expect(swallowed).toBeGreaterThan(0);
      // ...and each request ran exactly once on the live replica.
      expect([...handled].sort((a, b) => a - b)).toEqual(ns);
    } finally {
      await ghost.close();
    }
  });

  it('fails UNAVAILABLE, long before its deadline, when the replica running it dies: its closed connection shows it', async () => {
    const doomed = await connectNats({ url: nats.url, name: 'doomed-replica' });
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    await serveEndpoints(doomed, { service: 'orchestrator', instanceId: 'doomed', queue: 'q', log }, [
      on(hang, () => {
        started();
        return new Promise(() => {}); // never answers: the process "dies" below
      }),
    ]);
    const pending = request(caller, hang, {}, { timeoutMs: DEADLINE_MS }).catch((e: unknown) => e);
    await running;
    await doomed.close(); // its receipt went out; its heartbeats and its connection end with it
    const err = await pending;
    // The liveness probe met "no responders": the caller did not wait out the silence limit.
    expect(err).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/replica is gone: its NATS connection closed/) });
  });

  it('waits out the silence limit for a replica that accepted and froze with its connection open', async () => {
    // A frozen process: it took the request, sent its receipt (naming a liveness subject its
    // connection still subscribes to), and sends nothing more. The probe is delivered, so only the
    // silence limit can end the wait.
    const frozen = await connectNats({ url: nats.url, name: 'frozen-replica' });
    const liveness = createInbox();
    frozen.subscribe(liveness, { callback: () => undefined });
    frozen.subscribe(hang.subject, {
      queue: 'frozen-only',
      callback: (_err, msg) => {
        const h = natsHeaders();
        h.set(Headers.progress, 'accepted');
        h.set(Headers.liveness, liveness);
        msg.respond(undefined, { headers: h });
      },
    });
    await frozen.flush();
    try {
      const sent = performance.now();
      const err = await request(caller, hang, {}, { timeoutMs: DEADLINE_MS }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/went silent/) });
      // libuv's timers count whole milliseconds of its cached loop time, so a timer can end up to a
      // millisecond short of performance.now()'s span (seen: 5999.8 for 6000).
      expect(performance.now() - sent).toBeGreaterThanOrEqual(SILENCE_MS - 2);
    } finally {
      await frozen.close();
    }
  });

  it('waits for a handler that is slow but alive: its heartbeats keep the request open past the silence limit', async () => {
    await expect(request(caller, slow, { ms: SILENCE_MS + 2 * HEARTBEAT_MS }, { timeoutMs: DEADLINE_MS })).resolves.toEqual({ ok: true });
  });

  it('a resend that reaches the replica already running the request does not run it again', () => {
    const running = new InFlightReplies();
    expect(running.begin('_INBOX.x.1')).toBe(true);
    expect(running.begin('_INBOX.x.1')).toBe(false);
    running.done('_INBOX.x.1');
    expect(running.begin('_INBOX.x.1')).toBe(true);
    expect(RECEIPT_WAIT_MS).toBeLessThan(DEADLINE_MS / 4);
  });
});
