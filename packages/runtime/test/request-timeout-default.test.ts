import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startNats, type TestNats } from '@kandev/testkit';
import type { Endpoint } from '@kandev/contracts';
import {
  connectNats,
  createLogger,
  DEFAULT_REQUEST_TIMEOUT_MS,
  defaultRequestTimeoutMs,
  on,
  request,
  serveEndpoints,
  type NatsConnection,
} from '../src/index.js';

// REQUEST_TIMEOUT_MS (docs/operations.md) is the deadline of a request a service starts on its own:
// startService passes it to connectNats, and request() without timeoutMs, outside a handler, waits that long.
const slow = {
  name: 'test.slow',
  subject: 'kandev.test.request-timeout.slow',
  request: z.object({}),
  result: z.object({ waited_ms: z.number() }),
} as unknown as Endpoint;

let nats: TestNats;
let server: NatsConnection;
let client: NatsConnection;
let plain: NatsConnection;
beforeAll(async () => {
  nats = await startNats();
  server = await connectNats({ url: nats.url, name: 'request-timeout-server' });
  client = await connectNats({ url: nats.url, name: 'request-timeout-client', requestTimeoutMs: 300 });
  plain = await connectNats({ url: nats.url, name: 'request-timeout-plain' });
  // Never answers within the test: the caller's own deadline ends the wait.
  await serveEndpoints(server, { service: 'request-timeout', instanceId: 'i1', queue: 'q', log: createLogger('test', 'silent', 'i1') }, [
    on(slow, () => new Promise(() => undefined)),
  ]);
});
afterAll(async () => {
  await Promise.all([server, client, plain].map((c) => c?.close()));
  await nats?.stop();
});

describe('the default request deadline', () => {
  it('is the connection’s requestTimeoutMs, else DEFAULT_REQUEST_TIMEOUT_MS', () => {
    expect(defaultRequestTimeoutMs(client)).toBe(300);
    expect(defaultRequestTimeoutMs(plain)).toBe(DEFAULT_REQUEST_TIMEOUT_MS);
  });

  it('bounds a request sent without timeoutMs outside a handler', async () => {
    const e = await request(client, slow, {}).catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('timed out after 300 ms') });
  });

  it('gives way to an explicit timeoutMs', async () => {
    const e = await request(client, slow, {}, { timeoutMs: 100 }).catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('timed out after 100 ms') });
  });
});
