import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPairSync } from 'node:crypto';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { Life, Orch, OrchMcp } from '@kandev/contracts';
import {
  bindBusIdentity,
  BusIdentity,
  busIdentityFromEnv,
  connectNats,
  parsePublicKeys,
  request,
  signAgentToken,
  signRequest,
  BUS_PUBLIC_KEYS_ENV,
  type NatsConnection,
} from '@kandev/runtime';
import { connectMcp, eventually, natsLogin, processAlive, WsClient } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * The test kit's whole stack, as every stack runs now (ADR 0054, 0055): each service connected as
 * its own NATS user under deploy/nats/permissions.conf, no anonymous client, and verified callers:
 * the narrowed JetStream rights are enough for real work (event stream, the
 * orchestrator's durable consumer, lifecycle's registry bucket, live events on /ws), and the server
 * logs no permission violation. Then, holding the mcp user's own NATS credentials, a forged
 * stop_task request without the agent's token is refused and the target keeps running.
 */
let w: World;
let nc: NatsConnection | undefined;
beforeAll(async () => {
  w = await startWorld({}, { natsPermissions: true });
});
afterAll(async () => {
  await nc?.close().catch(() => undefined);
  await w?.stop();
});

it('runs sessions, MCP stop and steer, and live events with no permission violation', async () => {
  expect((await fetch(`${w.stack.gatewayUrl}/readyz`)).status).toBe(200);
  const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
  const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker' });
  const ws = await WsClient.connect(w.stack.wsUrl, w.token);
  try {
    expect((await ws.request('subscribe', { task_id: child.id })).type).toBe('response');
    // A turn that ends: lifecycle's event reaches the orchestrator's durable consumer.
    const quick = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: 'hello' });
    await eventually(async () => (await w.api.get(`/sessions/${quick.id}`)).body.state === 'WAITING_FOR_INPUT', 20_000);
    await ws.waitFor((f) => f.action === 'session.state_changed' && f.payload.session_id === quick.id);
    // A token bound to its execution, as lifecycle mints them: mcp reads the registry entry under
    // its own NATS user (DIRECT.GET only, ADR 0021).
    const executionId = await eventually(
      async () => ((await w.api.get(`/tasks/${child.id}/executions`)).body as Array<{ execution_id: string }>)[0]?.execution_id,
    );
    const bound = await connectMcp(
      w.stack.mcpUrl,
      await signAgentToken(w.stack.agentKey, { task_id: child.id, session_id: quick.id, execution_id: executionId, mode: 'task' }),
    );
    expect((await bound.listTools()).tools.length).toBeGreaterThan(0);
    await bound.close();
    // MCP steer and stop through the real mcp service.
    const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(parent.id));
    expect((await mcp.callJson('message_task_kandev', { task_id: child.id, prompt: sleepScript(60_000) })).json.status).toBe('sent');
    const pid = await eventually(async () => (await w.api.get(`/sessions/${quick.id}`)).body.execution?.pid as number | undefined);
    expect((await mcp.callJson('stop_task_kandev', { task_id: child.id })).json).toEqual({ task_id: child.id, status: 'stopped' });
    await eventually(async () => !processAlive(pid), 10_000);
    await mcp.close();
    // Tree controls, wakeups and costs: orchestrator ↔ holds, the holds service's own durable consumer.
    expect((await w.api.ok('POST', `/tasks/${parent.id}/tree/pause`)).hold.mode).toBe('pause');
    const wake = await w.api.ok('POST', '/wakeups', { task_id: child.id, reason: 'gated' });
    await eventually(async () => (await w.api.get(`/wakeups/${wake.id}`)).body.skip_reason === 'tree_paused', 20_000);
    await ws.waitFor((f) => f.action === 'tree_hold.created');
    expect((await w.api.post(`/tasks/${parent.id}/tree/resume`)).status).toBe(200);
    expect(
      (
        await w.api.post('/cost-events', {
          task_id: child.id,
          usage_event_id: `perm-${child.id}`,
          cost_cents: 3,
          tokens_in: 1,
          tokens_cached_in: 0,
          tokens_out: 1,
        })
      ).status,
    ).toBe(201);
    expect((await w.api.ok('GET', `/tasks/${parent.id}/tree/cost-summary`)).cost_cents).toBe(3);
  } finally {
    ws.close();
  }
  expect(w.stack.nats.output()).not.toMatch(/Violation/i);
});

it('refuses a forged stop_task published with the mcp user credentials but without the agent token; the child keeps running', async () => {
  const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
  const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker' });
  const session = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: sleepScript(60_000) });
  const pid = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.pid as number | undefined);
  nc = await connectNats({ url: w.stack.nats.url, name: 'forger', ...natsLogin(w.stack.nats, 'mcp') });
  const before = (await w.api.get(`/tasks/${child.id}`)).body;
  const forge = async (body: Record<string, unknown>) => {
    const raw = await nc!.request(OrchMcp.stopChildTask.subject, new TextEncoder().encode(JSON.stringify(body)), { timeout: 5_000 });
    return JSON.parse(new TextDecoder().decode(raw.data));
  };
  expect(await forge({ caller_task_id: parent.id, task_id: child.id })).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED' } });
  // A real token, but of another task (the child's own, as a leaked agent environment would hold).
  expect(await forge({ caller_task_id: parent.id, task_id: child.id, agent_token: await w.stack.agentToken(child.id) })).toMatchObject({
    ok: false,
    error: { code: 'UNAUTHORIZED' },
  });
  const after = (await w.api.get(`/tasks/${child.id}`)).body;
  expect(after).toEqual(before);
  expect(after.sessions[0].state).toBe('RUNNING');
  expect(processAlive(pid)).toBe(true);
  // Only the session's start is on record: the forged stops left no row.
  expect((await w.api.get(`/tasks/${child.id}/audit`)).body.map((r: { action: string }) => r.action)).toEqual(['session.start']);
  await w.api.post(`/tasks/${child.id}/stop`);
});

const enc = new TextEncoder();
const dec = new TextDecoder();
/** A raw request on the bus, as a forger holding a service's NATS password sends it: no caller assertion unless `headers` has one. */
async function rawRequest(conn: NatsConnection, subject: string, body: unknown): Promise<{ ok: boolean; error?: { code: string } }> {
  const reply = await conn.request(subject, enc.encode(JSON.stringify(body)), { timeout: 5_000 });
  return JSON.parse(dec.decode(reply.data));
}

it('admits no anonymous NATS client; every service reports nats_auth "user" and bus_identity "verified"', async () => {
  const anonymous = await connectNats({ url: w.stack.nats.url, name: 'anonymous' }).catch((e: unknown) => e);
  expect(String((anonymous as Error)?.message ?? anonymous)).toMatch(/authorization/i);
  for (const [name, p] of w.stack.services) {
    const body = (await (await fetch(`${p.urls.health}/readyz`)).json()) as { details?: Record<string, unknown> };
    expect(body.details, name).toMatchObject({ nats_auth: 'user', bus_identity: 'verified' });
  }
});

describe('an operator is verified, not trusted, on the bus', () => {
  let gatewayCreds: NatsConnection | undefined;
  afterAll(async () => {
    await gatewayCreds?.close().catch(() => undefined);
  });

  it('refuses a forged task stop sent with the gateway NATS user but no verifiable operator: UNAUTHORIZED, audited, nothing changed', async () => {
    const { task } = await makeTask(w.api, { title: 'forged-stop target' });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000) });
    const pid = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.pid as number | undefined);
    gatewayCreds = await connectNats({ url: w.stack.nats.url, name: 'forger-gw', ...natsLogin(w.stack.nats, 'gateway') });
    const forged = { actor: { type: 'operator' as const, id: 'agent-forged', workspaces: ['*'] }, task_id: task.id, reason: 'forged' };
    const before = (await w.api.get(`/tasks/${task.id}`)).body;
    // No assertion at all.
    expect(await rawRequest(gatewayCreds, Orch.taskStop.subject, forged)).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED' } });
    // An assertion signed with a key of the forger's own that claims to be the gateway's.
    const own = generateKeyPairSync('ed25519');
    const pub = `gateway=${own.publicKey.export({ format: 'der', type: 'spki' }).toString('base64')}`;
    const impostor = new BusIdentity('gateway', own.privateKey, parsePublicKeys(pub));
    const impostorNc = await connectNats({ url: w.stack.nats.url, name: 'forger-gw-2', ...natsLogin(w.stack.nats, 'gateway') });
    bindBusIdentity(impostorNc, impostor);
    try {
      expect(await request(impostorNc, Orch.taskStop, forged).catch((e: unknown) => e)).toMatchObject({ code: 'UNAUTHORIZED' });
    } finally {
      await impostorNc.close();
    }
    // Nothing changed: the session runs, its agent lives, the task reads as before.
    const after = (await w.api.get(`/tasks/${task.id}`)).body;
    expect(after).toEqual(before);
    expect(after.sessions[0].state).toBe('RUNNING');
    expect(processAlive(pid)).toBe(true);
    // Audited on the task it named, as the unverified actor it claimed.
    const audit = (await w.api.get(`/tasks/${task.id}/audit`)).body as Array<{ action: string; actor: string; outcome: string }>;
    const refused = audit.filter((r) => r.action === 'bus.unverified_caller');
    expect(refused).toHaveLength(2);
    expect(refused.every((r) => r.actor === 'operator:agent-forged (unverified)' && r.outcome === 'unauthorized')).toBe(true);
    await w.api.post(`/tasks/${task.id}/stop`);
  });

  it('accepts an operator request the gateway signed for exactly that operator, and refuses one whose actor differs from its assertion', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'signed read' });
    const gateway = busIdentityFromEnv('gateway', w.stack.busEnv('gateway'), false)!;
    const signed = await connectNats({ url: w.stack.nats.url, name: 'as-gateway', ...natsLogin(w.stack.nats, 'gateway') });
    bindBusIdentity(signed, gateway);
    try {
      const operator = { type: 'operator' as const, id: 'bus-test', workspaces: [workspace_id] };
      expect((await request(signed, Orch.taskGet, { actor: operator, task_id: task.id })).id).toBe(task.id);
      // The assertion is bound to its body: the same assertion on another actor is refused.
      const h = natsHeaders();
      await signRequest(
        gateway,
        h,
        Orch.taskGet.subject,
        enc.encode(JSON.stringify({ actor: operator, task_id: task.id })),
        5_000,
        { actor: operator },
        undefined,
      );
      const swapped = enc.encode(JSON.stringify({ actor: { ...operator, workspaces: ['*'] }, task_id: task.id }));
      const reply = JSON.parse(dec.decode((await signed.request(Orch.taskGet.subject, swapped, { timeout: 5_000, headers: h })).data));
      expect(reply).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED' } });
    } finally {
      await signed.close();
    }
  });

  it('lifecycle refuses an execution request signed by another service, sent with NATS credentials that may publish it', async () => {
    const { task } = await makeTask(w.api, { title: 'exec target' });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000) });
    const pid = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.pid as number | undefined);
    const exec = await eventually(
      async () => ((await w.api.get(`/tasks/${task.id}/executions`)).body as Array<{ execution_id: string; instance_id: string }>)[0],
    );
    // The orchestrator's NATS user may publish kandev.life.>; the signature is the holds service's.
    const holds = busIdentityFromEnv('holds', w.stack.busEnv('holds'), false)!;
    const forger = await connectNats({ url: w.stack.nats.url, name: 'exec-forger', ...natsLogin(w.stack.nats, 'orchestrator') });
    bindBusIdentity(forger, holds);
    try {
      const stop = { execution_id: exec.execution_id, reason: 'forged' };
      expect(await request(forger, Life.stop.at(exec.instance_id), stop).catch((e: unknown) => e)).toMatchObject({ code: 'UNAUTHORIZED' });
      // Unsigned, too.
      expect(await rawRequest(forger, Life.stop.at(exec.instance_id).subject, stop)).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED' } });
    } finally {
      await forger.close();
    }
    expect(processAlive(pid)).toBe(true);
    expect((await w.api.get(`/sessions/${session.id}`)).body.state).toBe('RUNNING');
    expect(w.stack.busEnv('holds')[BUS_PUBLIC_KEYS_ENV]).toContain('orchestrator=');
    await w.api.post(`/tasks/${task.id}/stop`);
  });
});
