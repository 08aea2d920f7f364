import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { eventually, startNats, type TestNats } from '@kandev/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { eventSubject, Streams, type Endpoint } from '@kandev/contracts';
import {
  buildEvent,
  connectNats,
  createLogger,
  ensureEventStream,
  EventPublisher,
  linkOf,
  on,
  request,
  serveEndpoints,
  type NatsConnection,
} from '../src/index.js';

/**
 * A NATS restart (or a client's own reconnect) must not swallow requests. nats.js resets its
 * outbound buffer at every reconnect attempt, so what is published while a connection is down is
 * dropped without a trace; before NatsLink, the first requests after a nats-server restart waited
 * their whole deadline (15 s through the gateway) and answered 503. Real nats-server throughout.
 */
const echo: Endpoint = {
  name: 'test.echo',
  subject: 'kandev.test.reconnect.echo',
  request: z.object({ n: z.number().int() }),
  result: z.object({ doubled: z.number() }),
};
const held: Endpoint = { name: 'test.held', subject: 'kandev.test.reconnect.held', request: z.object({}), result: z.object({ done: z.boolean() }) };
const late: Endpoint = { name: 'test.late', subject: 'kandev.test.reconnect.late', request: z.object({}), result: z.object({ late: z.boolean() }) };

/** Long enough that a lost request shows as a timeout, never as an answer. */
const DEADLINE_MS = 8_000;

describe('requests across a NATS reconnect', () => {
  const log = createLogger('test', 'silent');
  let nats: TestNats;
  const conns: NatsConnection[] = [];
  const connectTo = async (name: string) => {
    const nc = await connectNats({ url: nats.url, name });
    conns.push(nc);
    return nc;
  };
  const down = (nc: NatsConnection) => eventually(async () => !linkOf(nc)!.connected, 5_000, 5);
  const upAgain = (nc: NatsConnection) => eventually(async () => linkOf(nc)!.connected, 10_000, 5);

  beforeEach(async () => {
    nats = await startNats();
  });
  afterEach(async () => {
    await Promise.all(conns.splice(0).map((nc) => nc.close()));
    await nats.stop();
  });

  it('sends a request made while nats-server is down once the connection is back, and gets its answer', async () => {
    const responder = await connectTo('responder');
    await serveEndpoints(responder, { service: 'orchestrator', instanceId: 'r1', queue: 'q', log }, [
      on(echo, async (req) => ({ doubled: (req as { n: number }).n * 2 })),
    ]);
    const caller = await connectTo('caller');
    // Down for a second: the client tries again every 250 ms meanwhile, and each try would have
    // discarded a request published before it.
    const restarted = nats.restart(1_000);
    await down(caller);
    await expect(request(caller, echo, { n: 21 }, { timeoutMs: DEADLINE_MS })).resolves.toEqual({ doubled: 42 });
    await restarted;
  });

  it('holds a reply finished while its own connection is down until it is back, so the caller gets it', async () => {
    const responder = await connectTo('responder');
    let entered!: () => void;
    const handling = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    await serveEndpoints(responder, { service: 'orchestrator', instanceId: 'r1', queue: 'q', log }, [
      on(held, async () => {
        entered();
        await gate;
        return { done: true };
      }),
    ]);
    const caller = await connectTo('caller');
    const answer = request(caller, held, {}, { timeoutMs: DEADLINE_MS });
    await handling;
    // Only the responder's connection drops (the server and the caller stay up). A second forced
    // reconnect right after the first waits the client's reconnect interval before dialling, so the
    // handler finishes while that connection is down.
    await responder.reconnect();
    await upAgain(responder);
    void responder.reconnect();
    await down(responder);
    release();
    await expect(answer).resolves.toEqual({ done: true });
  });

  it('sends again, within its deadline, a request that met "no responders" just after its connection came back', async () => {
    const caller = await connectTo('caller');
    await nats.restart(300);
    await upAgain(caller);
    expect(linkOf(caller)!.peersMayBeReconnecting).toBe(true);
    // The responder comes back after the caller (as a service whose reconnect try comes later).
    const responderBack = (async () => {
      await new Promise((r) => setTimeout(r, 300));
      const responder = await connectTo('responder');
      await serveEndpoints(responder, { service: 'orchestrator', instanceId: 'r1', queue: 'q', log }, [on(late, async () => ({ late: true }))]);
    })();
    await expect(request(caller, late, {}, { timeoutMs: DEADLINE_MS })).resolves.toEqual({ late: true });
    await responderBack;
  });

  it('publishes an event emitted while nats-server is down once the connection is back, instead of failing at the acknowledgement timeout', async () => {
    const nc = await connectTo('publisher');
    await ensureEventStream(nc);
    const restarted = nats.restart(1_000);
    await down(nc);
    const ev = buildEvent(
      'turn.completed',
      { workspace_id: '00000000-0000-4000-8000-0000000000a1' },
      { execution_id: '00000000-0000-4000-8000-0000000000e1', turn_id: '00000000-0000-4000-8000-0000000000f1', stop_reason: 'end_turn' },
    );
    await new EventPublisher(nc).publish(ev);
    await restarted;
    const stored = await (await jetstreamManager(nc)).streams.getMessage(Streams.events.name, { last_by_subj: eventSubject('turn.completed') });
    expect(JSON.parse(new TextDecoder().decode(stored!.data)).id).toBe(ev.id);
  });

  it('still answers "no responders" at once on a connection that has not just reconnected', async () => {
    const caller = await connectTo('caller');
    expect(linkOf(caller)!.peersMayBeReconnecting).toBe(false);
    await expect(request(caller, late, {}, { timeoutMs: DEADLINE_MS })).rejects.toMatchObject({ code: 'UNAVAILABLE', message: 'no test.late responder' });
  });
});
