import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { KandevError, type Endpoint } from '@kandev/contracts';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, createLogger, on, serveEndpoints, type NatsConnection } from '../src/index.js';

/**
 * HandlerContext.afterReply: callbacks run once the reply has been handed to NATS, in order, also
 * after an error reply, and one that fails does not keep the others from running. Each callback
 * here publishes on the service's connection, so NATS delivers what it publishes after the reply
 * (one connection's messages keep their order): one subscription sees the reply first.
 */
const ok: Endpoint = { name: 'test.after_ok', subject: 'kandev.test.after.ok', request: z.object({}), result: z.object({ n: z.number() }) };
const failing: Endpoint = { name: 'test.after_fail', subject: 'kandev.test.after.fail', request: z.object({}), result: z.object({}) };

let nats: TestNats;
let service: NatsConnection;
let client: NatsConnection;
/** What the handler saw of its callbacks when it returned: none may have run yet. */
const ranBeforeReturn: number[] = [];
const enc = new TextEncoder();
const dec = new TextDecoder();

beforeAll(async () => {
  nats = await startNats();
  service = await connectNats({ url: nats.url, name: 'after-reply-service' });
  client = await connectNats({ url: nats.url, name: 'after-reply-client' });
  const log = createLogger('test', 'silent');
  const ran: string[] = [];
  await serveEndpoints(service, { service: 'orchestrator', instanceId: 'i1', queue: 'q', log }, [
    on(ok, async (_req, ctx) => {
      ran.length = 0;
      ctx.afterReply(() => {
        ran.push('first');
        service.publish('kandev.test.order.after', enc.encode('first'));
      });
      ctx.afterReply(() => {
        throw new Error('a failing follow-up');
      });
      ctx.afterReply(async () => {
        ran.push('third');
        service.publish('kandev.test.order.after', enc.encode('third'));
        throw new Error('a rejected follow-up');
      });
      await new Promise((r) => setTimeout(r, 5));
      ranBeforeReturn.push(ran.length);
      return { n: 1 };
    }),
    on(failing, async (_req, ctx) => {
      ctx.afterReply(() => service.publish('kandev.test.order.after', enc.encode('after-error')));
      throw new KandevError('CONFLICT', 'refused after deciding');
    }),
  ]);
});
afterAll(async () => {
  await client?.close();
  await service?.close();
  await nats?.stop();
});

/** Send a request whose reply comes to kandev.test.order.reply; the first `n` messages of that and the callbacks' subject, in arrival order. */
async function arrivals(subject: string, n: number): Promise<string[]> {
  const sub = client.subscribe('kandev.test.order.>');
  await client.flush();
  client.publish(subject, enc.encode('{}'), { reply: 'kandev.test.order.reply' });
  const out: string[] = [];
  for await (const m of sub) {
    const body = dec.decode(m.data);
    if (m.subject === 'kandev.test.order.reply') {
      if (!body.includes('"ok"')) continue; // a receipt or heartbeat, not the reply
      out.push(`reply:${JSON.parse(body).ok}`);
    } else out.push(body);
    if (out.length === n) break;
  }
  sub.unsubscribe();
  return out;
}

it('runs the callbacks after the reply is sent, in order, past one that throws', async () => {
  expect(await arrivals(ok.subject, 3)).toEqual(['reply:true', 'first', 'third']);
  expect(ranBeforeReturn).toEqual([0]);
});

it('runs them after an error reply too', async () => {
  expect(await arrivals(failing.subject, 2)).toEqual(['reply:false', 'after-error']);
});
