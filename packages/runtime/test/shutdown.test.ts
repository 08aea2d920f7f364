import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, request, type NatsConnection } from '../src/index.js';

const slow = { name: 'test.slow', subject: 'kandev.test.slow', request: z.object({}), result: z.object({ finished: z.boolean() }) };
let nats: TestNats;
let nc: NatsConnection;
beforeAll(async () => {
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: 'shutdown-test' });
});
afterAll(async () => {
  await nc?.close();
  await nats?.stop();
});

it('drains an in-flight request before the process exits on SIGTERM', async () => {
  const child = spawn(process.execPath, [fileURLToPath(new URL('./fixtures/slow-service.mjs', import.meta.url))], {
    env: { ...process.env, NATS_URL: nats.url, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve) => {
    createInterface({ input: child.stdout! }).on('line', (l) => l.includes('holds started') && resolve());
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const reply = request(nc, slow, {}, { timeoutMs: 5000 });
  await new Promise((r) => setTimeout(r, 100)); // the request is now in the handler
  child.kill('SIGTERM');
  await expect(reply).resolves.toEqual({ finished: true });
  expect(await exited).toBe(0);
  // And once gone, nothing answers.
  await expect(request(nc, slow, {}, { timeoutMs: 500 })).rejects.toMatchObject({ code: 'UNAVAILABLE' });
});
