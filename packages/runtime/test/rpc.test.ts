import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { KandevError, type Endpoint } from '@kandev/contracts';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, createLogger, on, request, serveEndpoints, type NatsConnection } from '../src/index.js';

const echo: Endpoint = {
  name: 'test.echo',
  subject: 'kandev.test.echo',
  request: z.object({ n: z.number().int() }),
  result: z.object({ doubled: z.number() }),
};
const liar: Endpoint = { name: 'test.liar', subject: 'kandev.test.liar', request: z.object({}), result: z.object({ must_be_string: z.string() }) };
const failing: Endpoint = { name: 'test.fail', subject: 'kandev.test.fail', request: z.object({}), result: z.object({}) };
const nobody: Endpoint = { name: 'test.nobody', subject: 'kandev.test.nobody', request: z.object({}), result: z.object({}) };

describe('typed request/reply endpoints over real NATS', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let calls = 0;
  const log = createLogger('test', 'silent');

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectNats({ url: nats.url, name: 'rpc-test' });
    await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'i1', queue: 'q', log }, [
      on(echo, async (req) => {
        calls++;
        return { doubled: (req as { n: number }).n * 2 };
      }),
      on(liar, async () => ({ must_be_string: 42 }) as never),
      on(failing, async () => {
        throw new KandevError('CONFLICT', 'queue full', { size: 10, limit: 10 });
      }),
    ]);
  });
  afterAll(async () => {
    await nc?.close();
    await nats?.stop();
  });

  it('refuses a request bigger than the server max payload as VALIDATION_ERROR, not an UNAVAILABLE outage', async () => {
    const big: Endpoint = { name: 'test.big', subject: 'kandev.test.nobody', request: z.object({ s: z.string() }), result: z.object({}) };
    const err = await request(nc, big, { s: 'a'.repeat(nc.info!.max_payload) }).catch((e) => e);
    expect(err).toMatchObject({ code: 'VALIDATION_ERROR', message: expect.stringMatching(/too large/) });
  });

  it('round-trips a valid request', async () => {
    await expect(request(nc, echo, { n: 21 })).resolves.toEqual({ doubled: 42 });
  });

  it('answers VALIDATION_ERROR to an invalid request without calling the handler', async () => {
    const before = calls;
    // Bypass client-side validation: publish raw bytes the way a foreign client could.
    const raw = await nc.request(echo.subject, new TextEncoder().encode(JSON.stringify({ n: 'x' })), { timeout: 2000 });
    const body = JSON.parse(new TextDecoder().decode(raw.data));
    expect(body.ok).toBe(false);
    expect(body.error.code).toBe('VALIDATION_ERROR');
    expect(calls).toBe(before);
  });

  it('answers BAD_REQUEST to bytes that are not JSON', async () => {
    const raw = await nc.request(echo.subject, new TextEncoder().encode('{not json'), { timeout: 2000 });
    expect(JSON.parse(new TextDecoder().decode(raw.data)).error.code).toBe('BAD_REQUEST');
  });

  it('refuses to send an invalid request from the client side', async () => {
    await expect(request(nc, echo, { n: 1.5 } as never)).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
  });

  it('catches a reply that breaks the contract', async () => {
    await expect(request(nc, liar, {})).rejects.toMatchObject({ code: 'INTERNAL_ERROR', message: 'invalid reply' });
  });

  it('carries a typed error with its code and details', async () => {
    const err = await request(nc, failing, {}).catch((e) => e);
    expect(err).toBeInstanceOf(KandevError);
    expect(err).toMatchObject({ code: 'CONFLICT', details: { size: 10, limit: 10 } });
  });

  it('maps no responders to UNAVAILABLE', async () => {
    await expect(request(nc, nobody, {}, { timeoutMs: 1000 })).rejects.toMatchObject({ code: 'UNAVAILABLE' });
  });

  it('answers $SRV.PING for the service', async () => {
    const msg = await nc.request('$SRV.PING.orchestrator', undefined, { timeout: 2000 });
    expect(JSON.parse(new TextDecoder().decode(msg.data))).toMatchObject({ name: 'orchestrator', metadata: { instance_id: 'i1' } });
  });
});
