import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Headers, KandevError, type Endpoint } from '@kandev/contracts';
import { startNats, type TestNats } from '@kandev/testkit';
import { headers } from '@nats-io/nats-core';
import { Svcm } from '@nats-io/services';
import { connectNats, createLogger, on, remainingMs, replyReserveMs, request, serveEndpoints, startService, type NatsConnection } from '../src/index.js';

/** A test endpoint with an empty request; its answer is `result` (an empty object unless given), typed as such for `request`. */
function ep(name: string): Endpoint<z.ZodObject<{}>, z.ZodObject<{}>>;
function ep<R extends z.ZodType>(name: string, result: R): Endpoint<z.ZodObject<{}>, R>;
function ep(name: string, result: z.ZodType = z.object({})): Endpoint {
  return { name: `test.${name}`, subject: `kandev.test.${name}`, request: z.object({}), result };
}
const slow = ep('slow', z.object({ ms: z.number() }));
const failing = ep('failing');
const front = ep('front', z.object({ waited_ms: z.number(), remaining_ms: z.number().nullable(), header: z.string().nullable(), request_id: z.string() }));
const hole = ep('hole'); // subscribed, never answered
const log = createLogger('test', 'silent');

let nats: TestNats;
let nc: NatsConnection;
beforeAll(async () => {
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: 'deadline-test' });
  nc.subscribe(hole.subject, { callback: () => undefined });
  // What the hole saw: the header the front's onward request carried.
  nc.subscribe('kandev.test.peek', {
    callback: (_e, m) => {
      m.respond(JSON.stringify({ ok: true, result: { header: m.headers?.get(Headers.timeout) ?? null, rid: m.headers?.get(Headers.requestId) ?? null } }));
    },
  });
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'd1', queue: 'deadline', log }, [
    on(slow, async () => {
      await new Promise((r) => setTimeout(r, 30));
      return { ms: 30 };
    }),
    on(failing, async () => {
      throw new KandevError('CONFLICT', 'no way');
    }),
    on(front, async () => {
      const peek = {
        name: 'test.peek',
        subject: 'kandev.test.peek',
        request: z.object({}),
        result: z.object({ header: z.string().nullable(), rid: z.string().nullable() }),
      };
      const seen = await request(nc, peek, {});
      const remaining = remainingMs() ?? null;
      const t = performance.now();
      // No timeout given: waits what remains of the caller's deadline, not the 5 s default.
      await request(nc, hole, {}).catch(() => undefined);
      return { waited_ms: performance.now() - t, remaining_ms: remaining, header: seen.header, request_id: seen.rid ?? '' };
    }),
  ]);
});
afterAll(async () => {
  await nc?.close();
  await nats?.stop();
});

describe('deadline', () => {
  it("travels in a header, and a handler's own requests end early enough for its answer to reach the caller", async () => {
    // The caller waits 3 s; the front's wait on the hole ends the reply's reserve (250 ms) before
    // that, so the caller gets the front's answer, not a timeout of its own (which would throw).
    // How long the caller waited by the wall clock is not asserted: on a starved runner the answer
    // and the caller's timer come due in the same turn of the event loop, late, and either can run
    // first; the answer's own figures below say where the front's wait ended.
    const answer = await request(nc, front, {}, { timeoutMs: 3_000 });
    expect(answer.waited_ms).toBeGreaterThan(answer.remaining_ms! - 50);
    expect(answer.remaining_ms).toBeLessThanOrEqual(3_000 - replyReserveMs(3_000));
    // Seen from inside: a raw caller that says 800 ms in the header but waits 4 s itself.
    const h = headers();
    h.set(Headers.timeout, '800');
    h.set(Headers.requestId, 'rid-2');
    const raw = await nc.request(front.subject, '{}', { timeout: 4000, headers: h });
    const r = JSON.parse(new TextDecoder().decode(raw.data)).result;
    // The onward request carried what was left of the 800 ms less the reserve, and the same request id.
    expect(replyReserveMs(800)).toBe(80);
    expect(Number(r.header)).toBeGreaterThan(0);
    expect(Number(r.header)).toBeLessThanOrEqual(720);
    expect(r.request_id).toBe('rid-2');
    expect(r.remaining_ms).toBeGreaterThan(0);
    expect(r.remaining_ms).toBeLessThanOrEqual(720);
    // The wait on the hole ended with that, not after the 5 s default.
    expect(r.waited_ms).toBeLessThan(2_000);
    expect(r.waited_ms).toBeGreaterThan(r.remaining_ms - 50);
  });

  it('keeps a tenth of the budget for the reply, at most 250 ms', () => {
    expect([100, 800, 2_500, 30_000].map(replyReserveMs)).toEqual([10, 80, 250, 250]);
  });

  it("refuses to send once the caller's deadline has passed", async () => {
    const outer = ep('outer', z.object({ code: z.string() }));
    const svc = await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'd2', queue: 'deadline2', log }, [
      on(outer, async () => {
        await new Promise((r) => setTimeout(r, 300));
        return {
          code: await request(nc, slow, {}).then(
            () => 'sent',
            (e: KandevError) => e.message,
          ),
        };
      }),
    ]);
    // A raw request whose header gives 100 ms: the handler outlives that and must not send onward.
    const h = headers();
    h.set(Headers.timeout, '100');
    const raw = await nc.request(outer.subject, '{}', { timeout: 2000, headers: h });
    expect(JSON.parse(new TextDecoder().decode(raw.data))).toEqual({ ok: true, result: { code: "test.slow not sent: the caller's deadline has passed" } });
    await svc.stop();
  });
});

describe('work a handler leaves running', () => {
  it('does not inherit the deadline once the reply is sent', async () => {
    const leaver = ep('leaver');
    const target = ep('target');
    let outcome: string | undefined;
    const svc = await serveEndpoints(nc, { service: 'holds', instanceId: 'd3', queue: 'deadline3', log }, [
      on(target, async () => ({})),
      on(leaver, async () => {
        // Runs after the reply, long after the caller's 100 ms.
        setTimeout(
          () =>
            void request(nc, target, {}).then(
              () => (outcome = 'sent'),
              (e: Error) => (outcome = e.message),
            ),
          300,
        );
        return {};
      }),
    ]);
    const h = headers();
    h.set(Headers.timeout, '100');
    await nc.request(leaver.subject, '{}', { timeout: 2000, headers: h });
    const until = Date.now() + 5_000;
    while (outcome === undefined && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    expect(outcome).toBe('sent');
    await svc.stop();
  });
});

describe('$SRV.STATS', () => {
  it('reports the time handlers really take and the errors they answer', async () => {
    for (let i = 0; i < 3; i++) await request(nc, slow, {});
    await request(nc, failing, {}).catch(() => undefined);
    const client = new Svcm(nc).client();
    const all = [];
    for await (const s of await client.stats('orchestrator', undefined)) all.push(s);
    const endpoints = all.flatMap((s) => s.endpoints ?? []);
    const slowStats = endpoints.find((e) => e.name === 'test_slow')!;
    expect(slowStats.num_requests).toBe(3);
    // Nanoseconds: each call sleeps 30 ms.
    expect(slowStats.average_processing_time).toBeGreaterThan(25e6);
    expect(slowStats.num_errors).toBe(0);
    const failStats = endpoints.find((e) => e.name === 'test_failing')!;
    expect(failStats.num_errors).toBe(1);
    expect(failStats.last_error).toBe('CONFLICT: no way');
  });
});

describe('in-flight requests', () => {
  it("are counted per service: stopping one does not wait for another one's requests", async () => {
    const env = { ...process.env, NATS_URL: nats.url, LOG_LEVEL: 'silent', SHUTDOWN_TIMEOUT_MS: '10000' };
    const stuck = ep('stuck');
    let release!: () => void;
    let entered = false;
    const held = new Promise<void>((r) => (release = r));
    const a = await startService(
      {
        name: 'holds',
        async start(rt) {
          await rt.serve([
            on(stuck, async () => {
              entered = true;
              await held;
              return {};
            }),
          ]);
        },
      },
      env,
    );
    const b = await startService({ name: 'gateway', async start() {} }, env);
    const pending = request(nc, stuck, {}, { timeoutMs: 10_000 });
    const until = Date.now() + 5_000;
    while (!entered && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
    expect(entered).toBe(true);
    const stopped = await Promise.race([b.stop().then(() => true), new Promise((r) => setTimeout(() => r(false), 3_000))]);
    release();
    expect(stopped).toBe(true);
    await pending;
    await a.stop();
  });
});
