import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, isNoResponders, isTimeout, type NatsConnection } from '../src/index.js';

// What rpc.ts relies on from the unpatched @nats-io/nats-core (ADR 0029 dropped our patch of it).
// Upstream, an answered request's promise is rejected a second time (a no-op on a settled promise,
// docs/upstream/README.md): it must never surface as an unhandled rejection, and the timeout and
// no-responders errors must still be the ones isTimeout / isNoResponders recognise.
let nats: TestNats;
let nc: NatsConnection;
const unhandled: unknown[] = [];
const onUnhandled = (e: unknown) => unhandled.push(e);
beforeAll(async () => {
  process.on('unhandledRejection', onUnhandled);
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: 'nats-client-request-test' });
  nc.subscribe('kandev.test.echo', { callback: (_e, m) => void m.respond(m.data) });
  nc.subscribe('kandev.test.hole', { callback: () => undefined }); // subscribed, never answers
  await nc.flush();
});
afterAll(async () => {
  process.off('unhandledRejection', onUnhandled);
  await nc?.close();
  await nats?.stop();
});

describe('NATS client requests, as released upstream', () => {
  it('answered requests resolve with their reply and leave no unhandled rejection behind', async () => {
    for (let i = 0; i < 20; i++) expect(new TextDecoder().decode((await nc.request('kandev.test.echo', `m${i}`, { timeout: 5_000 })).data)).toBe(`m${i}`);
    // A rejection nobody handles is reported after the microtask queue drains: flush a macrotask.
    await new Promise((r) => setImmediate(r));
    expect(unhandled).toEqual([]);
  });

  it('a request nobody answers fails as a timeout', async () => {
    const e = await nc.request('kandev.test.hole', 'x', { timeout: 50 }).catch((err: unknown) => err);
    expect(isTimeout(e)).toBe(true);
  });

  it('a request with no subscriber fails as no responders', async () => {
    const e = await nc.request('kandev.test.nobody', 'x', { timeout: 1_000 }).catch((err: unknown) => err);
    expect(isNoResponders(e)).toBe(true);
  });
});
