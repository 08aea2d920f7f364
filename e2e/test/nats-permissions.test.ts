import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OrchMcp } from '@kandev/contracts';
import { connectNats, createLogger, on, request, serveEndpoints, type NatsConnection } from '@kandev/runtime';
import { natsLogin, startNats, type TestNats } from '@kandev/testkit';
import type { NatsServiceUser } from '@kandev/runtime/dev/nats-auth';

/**
 * defence in depth: with the deployed NATS users and permissions (deploy/nats), the
 * gateway's credentials cannot publish on the orchestrator's MCP subjects at all; only the mcp
 * service's can. And each service's JetStream API rights are only those of its own stream,
 * consumer and bucket. Runs a real nats-server configured as npm start and the test kit configure
 * theirs (ADR 0054): deploy/nats/permissions.conf included, a random password per service.
 */
let nats: TestNats;
const login = (user: NatsServiceUser) => natsLogin(nats, user);
let orchestrator: NatsConnection;
let received = 0;
const callerTask = '00000000-0000-4000-8000-000000000001';
const childTask = '00000000-0000-4000-8000-000000000002';

beforeAll(async () => {
  nats = await startNats({ auth: true });
  orchestrator = await connectNats({ url: nats.url, name: 'orchestrator', ...login('orchestrator') });
  await serveEndpoints(orchestrator, { service: 'orchestrator', instanceId: 'o1', queue: 'orchestrator', log: createLogger('t', 'silent') }, [
    on(OrchMcp.stopChildTask, async (req) => {
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
  const gateway = await connectNats({ url: nats.url, name: 'gateway', ...login('gateway') });
  try {
    const errors: string[] = [];
    void (async () => {
      for await (const s of gateway.status()) if (s.type === 'error') errors.push(String((s as { error?: unknown }).error ?? s.type));
    })();
    const err = await request(gateway, OrchMcp.stopChildTask, { caller_task_id: callerTask, task_id: childTask }, { timeoutMs: 1500 }).catch((e) => e);
    expect(err).toMatchObject({ code: 'UNAVAILABLE' });
    expect(String(err.cause?.message ?? err.cause ?? err.message)).toMatch(/permission/i);
    expect(received).toBe(0);
    // And a raw publish is rejected by the server, too.
    gateway.publish(OrchMcp.stopChildTask.subject, new TextEncoder().encode('{}'));
    await gateway.flush().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 200));
    expect(received).toBe(0);
  } finally {
    await gateway.close().catch(() => undefined);
  }
});

it('lets the mcp user through on the same subject', async () => {
  const mcp = await connectNats({ url: nats.url, name: 'mcp', ...login('mcp') });
  try {
    await expect(request(mcp, OrchMcp.stopChildTask, { caller_task_id: callerTask, task_id: childTask })).resolves.toEqual({
      task_id: childTask,
      status: 'not_running',
    });
    expect(received).toBe(1);
  } finally {
    await mcp.close();
  }
});

it('lets the gateway user reach the operator surface', async () => {
  const gateway = await connectNats({ url: nats.url, name: 'gateway2', ...login('gateway') });
  try {
    // Nobody serves orch.task.get here: a permitted publish gets "no responders" at once (not a permission error).
    const err = await gateway.request('kandev.orch.task.get', new TextEncoder().encode('{}'), { timeout: 1000 }).catch((e) => e);
    expect(String(err?.message ?? err)).toMatch(/no responders/i);
  } finally {
    await gateway.close();
  }
});

/** 'denied' when the server refuses the publish (permissions violation), else 'allowed' (an answer, no responders or a timeout). */
async function publishRight(nc: NatsConnection, subject: string): Promise<'allowed' | 'denied'> {
  try {
    await nc.request(subject, new TextEncoder().encode('{}'), { timeout: 1500 });
    return 'allowed';
  } catch (e) {
    return /permission/i.test(String((e as Error).message ?? e) + String((e as { cause?: unknown }).cause ?? '')) ? 'denied' : 'allowed';
  }
}

const JS_RULES: Record<string, Array<[string, 'allowed' | 'denied']>> = {
  gateway: [
    ['$JS.API.INFO', 'denied'],
    ['$JS.API.STREAM.CREATE.KANDEV_EVENTS', 'denied'],
    ['$JS.API.STREAM.INFO.KANDEV_EVENTS', 'denied'],
    ['$JS.API.CONSUMER.CREATE.KANDEV_EVENTS.sneaky', 'denied'],
    ['$JS.API.CONSUMER.DURABLE.CREATE.KANDEV_EVENTS.sneaky', 'denied'],
    ['$KV.KANDEV_EXECUTIONS.x', 'denied'],
    ['kandev.evt.task.created', 'denied'],
    ['kandev.orch.task.get', 'allowed'],
    // The rollout drain (docs/operations.md) is lifecycle's own command, never the edge's.
    ['kandev.life.lifecycle-1.drain', 'denied'],
    ['kandev.life.lifecycle-1.exec.cancel', 'denied'],
    ['kandev.life.exec.launch', 'denied'],
    // Only mcp replicas tell each other of a caller's cancel (ADR 0037).
    ['kandev.mcp.call.cancelled', 'denied'],
  ],
  mcp: [
    ['$JS.API.INFO', 'denied'],
    ['$JS.API.STREAM.CREATE.KANDEV_EVENTS', 'denied'],
    ['$JS.API.CONSUMER.CREATE.KANDEV_EVENTS.sneaky', 'denied'],
    ['$KV.KANDEV_EXECUTIONS.x', 'denied'],
    ['kandev.evt.task.created', 'denied'],
    ['kandev.orch.task.stop', 'denied'],
    ['kandev.life.lifecycle-1.drain', 'denied'],
    ['kandev.life.lifecycle-1.exec.prompt', 'denied'],
    // One registry entry by key (is a token's execution live); no listing, no writes.
    ['$JS.API.DIRECT.GET.KV_KANDEV_EXECUTIONS.$KV.KANDEV_EXECUTIONS.x', 'allowed'],
    ['$JS.API.STREAM.INFO.KV_KANDEV_EXECUTIONS', 'denied'],
    ['$JS.API.STREAM.INFO.KANDEV_EVENTS', 'denied'],
    ['$JS.API.STREAM.PURGE.KV_KANDEV_EXECUTIONS', 'denied'],
    ['kandev.mcp.call.cancelled', 'allowed'],
  ],
  orchestrator: [
    ['$JS.API.INFO', 'allowed'],
    ['$JS.API.STREAM.INFO.KANDEV_EVENTS', 'allowed'],
    ['$JS.API.STREAM.UPDATE.KANDEV_EVENTS', 'allowed'],
    ['$JS.API.STREAM.DELETE.KANDEV_EVENTS', 'denied'],
    ['$JS.API.STREAM.PURGE.KANDEV_EVENTS', 'denied'],
    ['$JS.API.STREAM.CREATE.SOMETHING_ELSE', 'denied'],
    ['$JS.API.CONSUMER.DURABLE.CREATE.KANDEV_EVENTS.orchestrator-lifecycle', 'allowed'],
    ['$JS.API.CONSUMER.CREATE.KANDEV_EVENTS.someone-else', 'denied'],
    ['$JS.API.CONSUMER.DELETE.KANDEV_EVENTS.orchestrator-lifecycle', 'denied'],
    ['$JS.API.CONSUMER.DURABLE.CREATE.KANDEV_EVENTS.orchestrator-transcript', 'allowed'],
    ['$JS.API.CONSUMER.DELETE.KANDEV_EVENTS.orchestrator-transcript', 'denied'],
    // The registry: read (listings, direct gets), never written, purged or deleted.
    ['$JS.API.STREAM.INFO.KV_KANDEV_EXECUTIONS', 'allowed'],
    ['$JS.API.DIRECT.GET.KV_KANDEV_EXECUTIONS.$KV.KANDEV_EXECUTIONS.x', 'allowed'],
    ['$KV.KANDEV_EXECUTIONS.x', 'denied'],
    ['$JS.API.STREAM.PURGE.KV_KANDEV_EXECUTIONS', 'denied'],
    ['$JS.API.STREAM.DELETE.KV_KANDEV_EXECUTIONS', 'denied'],
    ['$JS.API.STREAM.CREATE.KV_KANDEV_EXECUTIONS', 'denied'],
  ],
  lifecycle: [
    ['$JS.API.STREAM.INFO.KANDEV_EVENTS', 'allowed'],
    ['$JS.API.STREAM.DELETE.KANDEV_EVENTS', 'denied'],
    ['$JS.API.STREAM.INFO.KV_KANDEV_EXECUTIONS', 'allowed'],
    ['$JS.API.STREAM.CREATE.SOMETHING_ELSE', 'denied'],
    ['$JS.API.CONSUMER.CREATE.KANDEV_EVENTS.sneaky', 'denied'],
    ['kandev.orch.mcp.stop_child_task', 'denied'],
    // The drain command (drain.bundle.js) in a lifecycle pod's preStop hook connects as this user.
    ['kandev.life.lifecycle-7c9f6d-abcde.drain', 'allowed'],
  ],
  holds: [
    ['$JS.API.STREAM.INFO.KANDEV_EVENTS', 'allowed'],
    ['$JS.API.CONSUMER.DURABLE.CREATE.KANDEV_EVENTS.holds-events', 'allowed'],
    ['$JS.API.CONSUMER.DELETE.KANDEV_EVENTS.holds-events', 'denied'],
    ['$JS.API.STREAM.DELETE.KANDEV_EVENTS', 'denied'],
    ['$JS.API.CONSUMER.CREATE.KANDEV_EVENTS.sneaky', 'denied'],
    ['$JS.API.STREAM.INFO.KV_KANDEV_EXECUTIONS', 'denied'],
    ['$KV.KANDEV_EXECUTIONS.x', 'denied'],
    // Lifecycle's execution subjects are the orchestrator's and lifecycle's alone (ADR 0054).
    ['kandev.life.lifecycle-1.exec.stop', 'denied'],
    ['kandev.life.lifecycle-1.exec.prompt', 'denied'],
    ['kandev.life.exec.launch', 'denied'],
    ['kandev.orch.task.stop', 'allowed'],
  ],
};

describe.each(Object.keys(JS_RULES))('JetStream API rights of the %s user', (user) => {
  let nc: NatsConnection;
  beforeAll(async () => {
    nc = await connectNats({ url: nats.url, name: `${user}-rights`, ...login(user as NatsServiceUser) });
  });
  afterAll(async () => {
    await nc?.close().catch(() => undefined);
  });
  it.each(JS_RULES[user]!)('%s → %s', async (subject, expected) => {
    expect(await publishRight(nc, subject)).toBe(expected);
  });
});

/**
 * 'denied' when the server refuses the subscription (permissions violation: the client closes it),
 * else 'allowed'. The server answers a SUB before the PONG of the flush that follows it.
 */
async function subscribeRight(nc: NatsConnection, subject: string): Promise<'allowed' | 'denied'> {
  const sub = nc.subscribe(subject);
  let refused: unknown;
  void sub.closed.then((e) => (refused = e));
  await nc.flush();
  // The closed promise settles on a later tick than the -ERR that closed the subscription.
  await Promise.race([sub.closed, Promise.resolve()]);
  const closed = sub.isClosed();
  if (!closed) sub.unsubscribe();
  return closed && /permission/i.test(String((refused as Error | undefined)?.message ?? refused)) ? 'denied' : 'allowed';
}

/** What each service's user may subscribe to (deploy/nats/permissions.conf): its own subjects, never another's requests. */
const SUBSCRIBE_RULES: Record<NatsServiceUser, Array<[string, 'allowed' | 'denied']>> = {
  gateway: [
    ['kandev.evt.task.created', 'allowed'],
    ['kandev.orch.task.stop', 'denied'],
    ['kandev.life.lifecycle-1.exec.stop', 'denied'],
    ['kandev.orch.mcp.stop_child_task', 'denied'],
  ],
  mcp: [
    ['kandev.mcp.call.cancelled', 'allowed'],
    ['kandev.orch.mcp.stop_child_task', 'denied'],
    ['kandev.life.>', 'denied'],
  ],
  orchestrator: [
    ['kandev.orch.mcp.stop_child_task', 'allowed'],
    ['kandev.life.lifecycle-1.exec.stop', 'denied'],
    ['kandev.holds.>', 'denied'],
  ],
  lifecycle: [
    ['kandev.life.lifecycle-1.exec.stop', 'allowed'],
    ['kandev.orch.task.stop', 'denied'],
    ['kandev.holds.>', 'denied'],
  ],
  holds: [
    ['kandev.holds.>', 'allowed'],
    ['kandev.orch.>', 'denied'],
    ['kandev.life.>', 'denied'],
  ],
};

describe.each(Object.keys(SUBSCRIBE_RULES) as NatsServiceUser[])('subscribe rights of the %s user', (user) => {
  let nc: NatsConnection;
  beforeAll(async () => {
    nc = await connectNats({ url: nats.url, name: `${user}-subscribe`, ...login(user) });
  });
  afterAll(async () => {
    await nc?.close().catch(() => undefined);
  });
  it.each(SUBSCRIBE_RULES[user])('%s → %s', async (subject, expected) => {
    expect(await subscribeRight(nc, subject)).toBe(expected);
  });
});

it('admits no anonymous client, and no client with a wrong password', async () => {
  const anonymous = await connectNats({ url: nats.url, name: 'anonymous' }).catch((e: unknown) => e);
  expect(String((anonymous as Error)?.message ?? anonymous)).toMatch(/authorization/i);
  const wrong = await connectNats({ url: nats.url, name: 'wrong', user: 'orchestrator', pass: 'orchestrator-test-pass' }).catch((e: unknown) => e);
  expect(String((wrong as Error)?.message ?? wrong)).toMatch(/authorization/i);
});

it('the server logs each refused publish (what the whole-stack permission test looks for)', () => {
  expect(nats.output()).toMatch(/Publish Violation|Permissions Violation/i);
});
