import { afterAll, beforeAll, expect, it } from 'vitest';
import { OrchMcp } from '@kandev/contracts';
import { connectNats, signAgentToken, type NatsConnection } from '@kandev/runtime';
import { connectMcp, eventually, processAlive, WsClient } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * The whole stack with each service connected as its own NATS user under deploy/nats/permissions.conf:
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
  nc = await connectNats({ url: w.stack.nats.url, name: 'forger', user: 'mcp', pass: 'mcp-test-pass' });
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
