import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { OrchMcp } from '@kandev/contracts';
import { connectNats, createLogger, on, request, serveEndpoints, type NatsConnection } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';

/**
 * defence in depth: with the deployed NATS users and permissions (deploy/nats), the
 * gateway's credentials cannot publish on the orchestrator's MCP subjects at all; only the mcp
 * service's can. Runs a real nats-server with that configuration.
 */
const conf = fileURLToPath(new URL('../../deploy/nats/test-permissions.conf', import.meta.url));
let nats: TestNats;
let orchestrator: NatsConnection;
let received = 0;
const callerTask = '00000000-0000-4000-8000-000000000001';
const childTask = '00000000-0000-4000-8000-000000000002';

beforeAll(async () => {
  nats = await startNats({ configFile: conf });
  orchestrator = await connectNats({ url: nats.url, name: 'orchestrator', user: 'orchestrator', pass: 'orchestrator-test-pass' });
  await serveEndpoints(orchestrator, { service: 'orchestrator', instanceId: 'o1', queue: 'orchestrator', log: createLogger('t', 'silent') }, [
    on(OrchMcp.stopTask, async (req) => {
      received++;
      return { task_id: req.task_id, status: 'not_running' as const };
    }),
  ]);
});
afterAll(async () => {
  await orchestrator?.close();
  await nats?.stop();
});

it('refuses the gateway user on kandev.orch.mcp.> and nothing reaches the orchestrator', async () => {
  const gateway = await connectNats({ url: nats.url, name: 'gateway', user: 'gateway', pass: 'gateway-test-pass' });
  try {
    const errors: string[] = [];
    void (async () => {
      for await (const s of gateway.status()) if (s.type === 'error') errors.push(String((s as { error?: unknown }).error ?? s.type));
    })();
    const err = await request(gateway, OrchMcp.stopTask, { caller_task_id: callerTask, task_id: childTask }, { timeoutMs: 1500 }).catch((e) => e);
    expect(err).toMatchObject({ code: 'UNAVAILABLE' });
    expect(String(err.cause?.message ?? err.cause ?? err.message)).toMatch(/permission/i);
    expect(received).toBe(0);
    // And a raw publish is rejected by the server, too.
    gateway.publish(OrchMcp.stopTask.subject, new TextEncoder().encode('{}'));
    await gateway.flush().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 200));
    expect(received).toBe(0);
  } finally {
    await gateway.close().catch(() => undefined);
  }
});

it('lets the mcp user through on the same subject', async () => {
  const mcp = await connectNats({ url: nats.url, name: 'mcp', user: 'mcp', pass: 'mcp-test-pass' });
  try {
    await expect(request(mcp, OrchMcp.stopTask, { caller_task_id: callerTask, task_id: childTask })).resolves.toEqual({ task_id: childTask, status: 'not_running' });
    expect(received).toBe(1);
  } finally {
    await mcp.close();
  }
});

it('lets the gateway user reach the operator surface', async () => {
  const gateway = await connectNats({ url: nats.url, name: 'gateway2', user: 'gateway', pass: 'gateway-test-pass' });
  try {
    // Nobody serves orch.task.get here: a permitted publish gets "no responders" at once (not a permission error).
    const err = await gateway.request('kandev.orch.task.get', new TextEncoder().encode('{}'), { timeout: 1000 }).catch((e) => e);
    expect(String(err?.message ?? err)).toMatch(/no responders/i);
  } finally {
    await gateway.close();
  }
});
