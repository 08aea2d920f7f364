import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { natsLogin, startNats, type TestNats } from '@kandev/testkit';
import { BUS_KEY_ENV, BUS_PUBLIC_KEYS_ENV, generateBusKeys, startService, type RunningService } from '../src/index.js';

/**
 * A service on the bus (ADR 0054, 0055): with NODE_ENV=production it refuses a NATS that admits
 * anonymous clients and a start without bus keys; elsewhere it starts and says how it is admitted
 * on /readyz (`nats_auth`, `bus_identity`). Real nats-servers: one open, one with a user per service.
 */
let open: TestNats;
let authed: TestNats;
const keys = generateBusKeys();
const busEnv = { [BUS_KEY_ENV]: keys.privateKeys.holds, [BUS_PUBLIC_KEYS_ENV]: keys.publicKeys };
const def = { name: 'holds' as const, publishesEvents: false, async start() {} };
const base = { LOG_LEVEL: 'silent', HEALTH_PORT: '0' };
const running: RunningService[] = [];

beforeAll(async () => {
  [open, authed] = await Promise.all([startNats(), startNats({ auth: true })]);
});
afterAll(async () => {
  for (const s of running) await s.stop();
  await Promise.all([open?.stop(), authed?.stop()]);
});

const readyDetails = async (s: RunningService) => ((await (await fetch(`${s.healthUrl}/readyz`)).json()) as { details: Record<string, unknown> }).details;

describe('with NODE_ENV=production', () => {
  it('refuses a NATS that admits clients without a user', async () => {
    await expect(startService(def, { ...base, ...busEnv, NODE_ENV: 'production', NATS_URL: open.url })).rejects.toThrow(/admits clients without credentials/);
  });
  it('refuses to start without bus keys', async () => {
    const login = natsLogin(authed, 'holds');
    await expect(startService(def, { ...base, NODE_ENV: 'production', NATS_URL: authed.url, NATS_USER: login.user, NATS_PASS: login.pass })).rejects.toThrow(
      /KANDEV_BUS_KEY and KANDEV_BUS_PUBLIC_KEYS are required/,
    );
  });
  it('starts with its NATS user and its bus key, and says so on /readyz', async () => {
    const login = natsLogin(authed, 'holds');
    const s = await startService(def, { ...base, ...busEnv, NODE_ENV: 'production', NATS_URL: authed.url, NATS_USER: login.user, NATS_PASS: login.pass });
    running.push(s);
    expect(await readyDetails(s)).toMatchObject({ nats_auth: 'user', bus_identity: 'verified' });
  });
});

it('elsewhere starts on an open NATS without keys (service-level tests) and reports it', async () => {
  const s = await startService(def, { ...base, NATS_URL: open.url });
  running.push(s);
  expect(await readyDetails(s)).toMatchObject({ nats_auth: 'none', bus_identity: 'off' });
});
