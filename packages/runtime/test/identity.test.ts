import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { SignJWT } from 'jose';
import { Actor, type Endpoint } from '@kandev/contracts';
import { startNats, type TestNats } from '@kandev/testkit';
import {
  bindBusIdentity,
  BusIdentity,
  BusIdentityError,
  busIdentityFromEnv,
  callerProblem,
  connectNats,
  createLogger,
  generateBusKeys,
  on,
  parsePublicKeys,
  request,
  serveEndpoints,
  type BusRefusal,
  type NatsConnection,
} from '../src/index.js';

const keys = generateBusKeys();
const identityOf = (service: string) =>
  busIdentityFromEnv(service, { KANDEV_BUS_KEY: keys.privateKeys[service], KANDEV_BUS_PUBLIC_KEYS: keys.publicKeys }, false)!;
const enc = new TextEncoder();
const alice = { id: 'alice', workspaces: ['w1'] };

describe('callerProblem (the rule)', () => {
  const gateway = { service: 'gateway', operator: alice };
  it('admits an operator actor the gateway vouches for, exactly', () => {
    expect(callerProblem({ caller: gateway, forwardedOperator: undefined, payloadOperator: alice })).toBeNull();
    expect(callerProblem({ caller: gateway, forwardedOperator: undefined, payloadOperator: { id: 'alice', workspaces: ['*'] } })).toMatch(/not the one/);
    expect(callerProblem({ caller: gateway, forwardedOperator: undefined, payloadOperator: { id: 'mallory', workspaces: ['w1'] } })).toMatch(/not the one/);
  });
  it('refuses an operator actor without a verified caller, or from another service without the gateway’s word', () => {
    expect(callerProblem({ caller: null, forwardedOperator: undefined, payloadOperator: alice })).toMatch(/without a verified caller/);
    expect(callerProblem({ caller: { service: 'holds' }, forwardedOperator: undefined, payloadOperator: alice })).toMatch(/did not vouch/);
    // A service passing on the gateway's assertion for this operator: admitted.
    expect(callerProblem({ caller: { service: 'holds' }, forwardedOperator: alice, payloadOperator: alice })).toBeNull();
    // Operator claims in another service's own assertion count for nothing.
    expect(callerProblem({ caller: { service: 'holds', operator: alice }, forwardedOperator: undefined, payloadOperator: alice })).toMatch(/did not vouch/);
  });
  it('holds an endpoint to its callers; requests without an operator actor need no caller elsewhere', () => {
    const callers = ['orchestrator', 'lifecycle'];
    expect(callerProblem({ caller: { service: 'orchestrator' }, forwardedOperator: undefined, payloadOperator: undefined, callers })).toBeNull();
    expect(callerProblem({ caller: { service: 'holds' }, forwardedOperator: undefined, payloadOperator: undefined, callers })).toMatch(
      /only orchestrator and lifecycle/,
    );
    expect(callerProblem({ caller: null, forwardedOperator: undefined, payloadOperator: undefined, callers })).toMatch(/not verified/);
    expect(callerProblem({ caller: null, forwardedOperator: undefined, payloadOperator: undefined })).toBeNull();
  });
});

describe('caller assertions', () => {
  const gateway = identityOf('gateway');
  const orchestrator = identityOf('orchestrator');
  const body = enc.encode('{"x":1}');

  it('verify for their subject and body, naming the signer and its operator', async () => {
    const token = await gateway.assert('kandev.orch.task.stop', body, 5_000, alice);
    expect(await orchestrator.verify(token, 'kandev.orch.task.stop', body)).toEqual({ service: 'gateway', operator: alice });
    await expect(orchestrator.verify(token, 'kandev.orch.task.delete', body)).rejects.toThrow(BusIdentityError);
    await expect(orchestrator.verify(token, 'kandev.orch.task.stop', enc.encode('{"x":2}'))).rejects.toThrow(/another request body/);
    // Passed on by a service acting on it: subject and body are the first hop's, signature and expiry still count.
    expect((await orchestrator.verify(token, 'kandev.orch.tree.lineage', enc.encode('{}'), true)).operator).toEqual(alice);
  });

  it('refuse a key outside the set, an expired assertion, and a signer claiming another name', async () => {
    const own = generateKeyPairSync('ed25519');
    const impostor = new BusIdentity(
      'gateway',
      own.privateKey,
      parsePublicKeys(`gateway=${own.publicKey.export({ format: 'der', type: 'spki' }).toString('base64')}`),
    );
    await expect(orchestrator.verify(await impostor.assert('s', body, 1_000, alice), 's', body)).rejects.toThrow(/does not verify/);
    const gw = { privateKey: createPrivateKey({ key: Buffer.from(keys.privateKeys.gateway!, 'base64'), format: 'der', type: 'pkcs8' }) };
    const expired = await new SignJWT({})
      .setProtectedHeader({ alg: 'EdDSA', kid: 'gateway' })
      .setIssuer('gateway')
      .setAudience('s')
      .setExpirationTime(Math.floor(Date.now() / 1000) - 60)
      .sign(gw.privateKey);
    await expect(orchestrator.verify(expired, 's', body)).rejects.toThrow(/exp/);
    // Signed by the gateway's key but naming holds as issuer: the kid picks the key, the issuer must match it.
    const renamed = await new SignJWT({})
      .setProtectedHeader({ alg: 'EdDSA', kid: 'gateway' })
      .setIssuer('holds')
      .setAudience('s')
      .setExpirationTime(Math.floor(Date.now() / 1000) + 60)
      .sign(gw.privateKey);
    await expect(orchestrator.verify(renamed, 's', body)).rejects.toThrow(/does not verify/);
    // Claims changed under a valid signature (another subject), another algorithm named, no signature at all.
    const [h, , sig] = (await gateway.assert('s', body, 1_000, alice)).split('.');
    const claims = Buffer.from(JSON.stringify({ iss: 'gateway', aud: 'kandev.orch.task.delete', exp: Math.floor(Date.now() / 1000) + 60 })).toString(
      'base64url',
    );
    await expect(orchestrator.verify(`${h}.${claims}.${sig}`, 'kandev.orch.task.delete', body)).rejects.toThrow(/signature verification failed/);
    const none = Buffer.from(JSON.stringify({ alg: 'none', kid: 'gateway' })).toString('base64url');
    await expect(orchestrator.verify(`${none}.${claims}.`, 'kandev.orch.task.delete', body)).rejects.toThrow(/alg "none"/);
    await expect(orchestrator.verify(`${h}.${claims}`, 's', body)).rejects.toThrow(/not a JWS/);
  });

  it('are configured both keys or none; production requires them; a key that is not its own is refused', () => {
    expect(busIdentityFromEnv('gateway', {}, false)).toBeNull();
    expect(() => busIdentityFromEnv('gateway', {}, true)).toThrow(/required with NODE_ENV=production/);
    expect(() => busIdentityFromEnv('gateway', { KANDEV_BUS_KEY: keys.privateKeys.gateway }, false)).toThrow(/KANDEV_BUS_PUBLIC_KEYS is required/);
    expect(() => busIdentityFromEnv('gateway', { KANDEV_BUS_KEY: keys.privateKeys.holds, KANDEV_BUS_PUBLIC_KEYS: keys.publicKeys }, false)).toThrow(
      /not the private key/,
    );
    expect(() => busIdentityFromEnv('gateway', { KANDEV_BUS_KEY: 'change-me', KANDEV_BUS_PUBLIC_KEYS: keys.publicKeys }, false)).toThrow(/value hidden/);
  });

  it('cost little: sign and verify of one request (measured)', async () => {
    const n = 500;
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await orchestrator.verify(await gateway.assert('kandev.orch.task.stop', body, 5_000, alice), 'kandev.orch.task.stop', body);
    const perRequestUs = ((performance.now() - t0) / n) * 1000;
    console.info(`bus identity: sign + verify ${perRequestUs.toFixed(0)} µs per request (${n} requests)`);
    expect(perRequestUs).toBeLessThan(5_000);
  });
});

/** Requests over a real (open) nats-server between connections bound to identities, as services run. */
describe('verified callers over NATS', () => {
  const ActorReq = z.object({ actor: Actor, n: z.number().int() });
  const stop: Endpoint = { name: 'test.stop', subject: 'kandev.test.stop', request: ActorReq, result: z.object({ n: z.number() }) };
  const lineage: Endpoint = { name: 'test.lineage', subject: 'kandev.test.lineage', request: ActorReq, result: z.object({ n: z.number() }) };
  const exec: Endpoint = { name: 'test.exec', subject: 'kandev.test.exec', request: z.object({ n: z.number().int() }), result: z.object({ n: z.number() }) };
  let nats: TestNats;
  const conns: NatsConnection[] = [];
  const refusals: BusRefusal[] = [];
  let ran = 0;
  const connectAs = async (service: string | null) => {
    const nc = await connectNats({ url: nats.url, name: service ?? 'unsigned' });
    if (service) bindBusIdentity(nc, identityOf(service));
    conns.push(nc);
    return nc;
  };
  const log = createLogger('test', 'silent');

  beforeAll(async () => {
    nats = await startNats();
    const orch = await connectAs('orchestrator');
    const orchIdentity = identityOf('orchestrator');
    bindBusIdentity(orch, orchIdentity);
    orchIdentity.onRefused(async (r) => void refusals.push(r));
    await serveEndpoints(orch, { service: 'orchestrator', instanceId: 'o1', queue: 'orchestrator', log }, [
      on(stop, async (req) => {
        ran++;
        return { n: (req as { n: number }).n };
      }),
    ]);
    await serveEndpoints(orch, { service: 'orchestrator', instanceId: 'o1', queue: 'orchestrator', log, callers: ['orchestrator', 'lifecycle'] }, [
      on(exec, async (req) => ({ n: (req as { n: number }).n })),
    ]);
    // A holds-like service that acts on a gateway request by asking the orchestrator with the same actor.
    const holds = await connectAs('holds');
    await serveEndpoints(holds, { service: 'holds', instanceId: 'h1', queue: 'holds', log }, [
      on(lineage, async (req) => request(holds, stop, req as z.infer<typeof ActorReq>)),
    ]);
  });
  afterAll(async () => {
    for (const nc of conns) await nc.close().catch(() => undefined);
    await nats?.stop();
  });

  const operator = { type: 'operator' as const, ...alice };

  it('runs an operator request the gateway signed, and one the holds service passes on for it', async () => {
    const gateway = await connectAs('gateway');
    expect(await request(gateway, stop, { actor: operator, n: 1 })).toEqual({ n: 1 });
    expect(await request(gateway, lineage, { actor: operator, n: 2 })).toEqual({ n: 2 });
  });

  it('refuses an unsigned operator request, and one from another service on its own word: UNAUTHORIZED, reported, not run', async () => {
    const before = ran;
    refusals.length = 0;
    const unsigned = await connectAs(null);
    await expect(request(unsigned, stop, { actor: operator, n: 3 })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    const holds = await connectAs('holds');
    await expect(request(holds, stop, { actor: operator, n: 4 })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    expect(ran).toBe(before);
    expect(refusals.map((r) => [r.endpoint, (r.payload as { n: number }).n])).toEqual([
      ['test.stop', 3],
      ['test.stop', 4],
    ]);
  });

  it('admits an endpoint restricted to some callers only from them', async () => {
    expect(await request(await connectAs('lifecycle'), exec, { n: 5 })).toEqual({ n: 5 });
    await expect(request(await connectAs('gateway'), exec, { n: 6 })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(request(await connectAs(null), exec, { n: 7 })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  });
});
