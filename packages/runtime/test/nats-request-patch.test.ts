import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, type NatsConnection } from '../src/index.js';

// ADR 0016: the installed @nats-io/nats-core builds no RequestError for a request that succeeded
// (scripts/patch-nats.mjs, the root postinstall). request.js reads the class off its errors module
// at each use, so counting constructions there sees what the client builds.
const require = createRequire(import.meta.url);
const errors = require(join(dirname(require.resolve('@nats-io/nats-core')), 'errors.js')) as { RequestError: new (...args: unknown[]) => Error };
const Original = errors.RequestError;
let built = 0;

let nats: TestNats;
let nc: NatsConnection;
beforeAll(async () => {
  errors.RequestError = class Counted extends Original {
    constructor(...args: unknown[]) {
      super(...args);
      built++;
    }
  };
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: 'nats-patch-test' });
  nc.subscribe('kandev.test.echo', { callback: (_e, m) => m.respond(m.data) });
  nc.subscribe('kandev.test.hole', { callback: () => undefined }); // subscribed, never answers
  await nc.flush();
});
afterAll(async () => {
  errors.RequestError = Original;
  await nc?.close();
  await nats?.stop();
});

describe('the NATS client patch (ADR 0016)', () => {
  it('a request that is answered builds no RequestError', async () => {
    built = 0;
    for (let i = 0; i < 20; i++) expect(new TextDecoder().decode((await nc.request('kandev.test.echo', `m${i}`, { timeout: 5_000 })).data)).toBe(`m${i}`);
    expect(built).toBe(0);
  });

  it('a request that times out still fails as before', async () => {
    built = 0;
    await expect(nc.request('kandev.test.hole', 'x', { timeout: 50 })).rejects.toMatchObject({ name: 'TimeoutError' });
    // The timeout path is cancel()'s, unpatched: it still builds its error.
    expect(built).toBe(1);
  });
});
