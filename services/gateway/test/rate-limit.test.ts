import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OrchRead, rateWindow } from '@kandev/contracts';
import { connectNats, createLogger, on, serveEndpoints, type NatsConnection } from '@kandev/runtime';
import { eventually, startNats, type TestNats } from '@kandev/testkit';
import { GatewayEnv } from '../src/env.js';
import { fixtures, operatorToken, startGateway } from './helpers.js';

const WS = '00000000-0000-4000-8000-000000000001';

/** at the gateway: per operator token, 429 RATE_LIMITED with Retry-After in the error shape (ADR 0065). */
describe('per-token operator rate', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let gw: Awaited<ReturnType<typeof startGateway>>;
  let served = 0;
  beforeAll(async () => {
    nats = await startNats();
    // 2 per second on average, 10 at once: a 5 s window holding 10 requests.
    gw = await startGateway(nats.url, { KANDEV_OPERATOR_RATE: '2', KANDEV_OPERATOR_BURST: '10' });
    nc = await connectNats({ url: nats.url, name: 'gateway-rate-test' });
    await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake-orch', queue: 'orchestrator', log: createLogger('fake', 'silent') }, [
      on(OrchRead.workspaceList, async () => {
        served++;
        return { items: [fixtures.workspace(WS)], next_cursor: null };
      }),
    ]);
  });
  afterAll(async () => {
    await gw?.running.stop();
    await nc?.close();
    await nats?.stop();
  });

  const get = (path: string, token?: string) => fetch(`${gw.http}${path}`, { headers: token ? { authorization: `Bearer ${token}` } : {} });

  it('answers a flood from one token 429 with Retry-After and RATE_LIMITED, while another token is served normally', async () => {
    const alice = await operatorToken(['*'], 'alice');
    const bob = await operatorToken(['*'], 'bob');
    const answers = await Promise.all(Array.from({ length: 25 }, () => get('/workspaces', alice)));
    expect(answers.filter((r) => r.status === 200)).toHaveLength(10);
    const limited = answers.filter((r) => r.status === 429);
    expect(limited).toHaveLength(15);
    expect(served).toBe(10);
    for (const r of limited) {
      const retryAfter = Number(r.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(5);
      const body = await r.json();
      expect(body).toEqual({
        error: {
          code: 'RATE_LIMITED',
          message: expect.stringMatching(/^too many requests for this operator token/),
          details: { retry_after_s: retryAfter, limit: 10, window_ms: 5000 },
        },
      });
    }
    // Another token, and requests without one (health, refused tokens), are not held back.
    expect((await get('/workspaces', bob)).status).toBe(200);
    expect((await get('/healthz')).status).toBe(200);
    expect((await get('/workspaces')).status).toBe(401);
    expect((await get('/workspaces', 'not-a-token')).status).toBe(401);
    // Once the window turns the token is served again.
    await eventually(async () => (await get('/workspaces', alice)).status === 200, 10_000, 250);
  });

  it('defaults: 50 per second with a burst of 250 per token; the allowance is split over GATEWAY_REPLICAS', () => {
    const env = GatewayEnv.parse({ KANDEV_JWT_SECRET: 'x'.repeat(20) });
    expect(env.KANDEV_OPERATOR_RATE).toBe(50);
    expect(rateWindow({ rate: 50, burst: 250, replicas: 1 })).toEqual({ points: 250, windowMs: 5_000 });
    expect(rateWindow({ rate: 50, burst: 250, replicas: 2 })).toEqual({ points: 125, windowMs: 5_000 });
    expect(rateWindow({ rate: 0, burst: 250, replicas: 1 })).toBeNull();
  });
});
