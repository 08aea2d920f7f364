import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, FIRST_CONNECT_ATTEMPTS } from '../src/index.js';

/*
 * A service's first NATS connection (connectNats): a dial that times out is tried again, so a
 * starting service that stalls on a loaded machine does not fail its start; a refused dial fails at
 * once. Real nats-server behind a TCP relay that can hold connections silent.
 */
let nats: TestNats;
let relay: Server;
let relayUrl: string;
const sockets: Socket[] = [];
/** How many of the next connections the relay accepts and never answers (a server that does not send INFO). */
let silentLeft = 0;
let accepted = 0;

beforeEach(async () => {
  nats = await startNats();
  const target = new URL(nats.url);
  silentLeft = 0;
  accepted = 0;
  relay = createServer((client) => {
    accepted++;
    sockets.push(client);
    if (silentLeft > 0) {
      silentLeft--;
      return;
    }
    const upstream = createConnection(Number(target.port), target.hostname);
    sockets.push(upstream);
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  const addr = relay.address();
  relayUrl = `nats://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
});

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await new Promise((r) => relay.close(r));
  await nats.stop();
});

describe('connectNats, the first connection', () => {
  it('dials again when a dial times out, and the connection then works', async () => {
    silentLeft = FIRST_CONNECT_ATTEMPTS - 1;
    const nc = await connectNats({ url: relayUrl, name: 'first-connect-test', dialTimeoutMs: 300 });
    try {
      expect(accepted).toBe(FIRST_CONNECT_ATTEMPTS);
      const sub = nc.subscribe('kandev.test.first-connect', { max: 1 });
      nc.publish('kandev.test.first-connect', 'hello');
      for await (const m of sub) expect(m.string()).toBe('hello');
    } finally {
      await nc.close();
    }
  });

  it('gives up after its attempts when every dial times out', async () => {
    silentLeft = FIRST_CONNECT_ATTEMPTS;
    await expect(connectNats({ url: relayUrl, name: 'first-connect-test', dialTimeoutMs: 300 })).rejects.toThrow(/timeout/);
    expect(accepted).toBe(FIRST_CONNECT_ATTEMPTS);
  });

  it('fails when nothing listens', async () => {
    const port = Number(new URL(relayUrl).port);
    await new Promise((r) => relay.close(r));
    relay = createServer();
    await expect(connectNats({ url: `nats://127.0.0.1:${port}`, name: 'first-connect-test', dialTimeoutMs: 300 })).rejects.toThrow();
    expect(accepted).toBe(0);
  });
});
