import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { idempotent, Orch, OrchMcp, OrchTree as Tree, type Endpoint } from '@kandev/contracts';
import { startNats, type TestNats } from '@kandev/testkit';
import { connectNats, createLogger, on, request, serveEndpoints, type NatsConnection } from '../src/index.js';

/**
 * B-6 (ADR 0062): an idempotent control whose replica dies mid-request is sent once more, to a
 * replica still there, within the same deadline; any other request fails as before (ADR 0044).
 */
const schema = { request: z.object({ n: z.number().int() }), result: z.object({ n: z.number(), by: z.string() }) };
const control: Endpoint = idempotent({ name: 'test.control', subject: 'kandev.test.control', ...schema });
const create: Endpoint = { name: 'test.create', subject: 'kandev.test.create', ...schema };
const DEADLINE_MS = 20_000;

describe('resend once (B-6)', () => {
  let nats: TestNats;
  let caller: NatsConnection;
  const log = createLogger('test', 'silent');

  beforeAll(async () => {
    nats = await startNats();
    caller = await connectNats({ url: nats.url, name: 'caller' });
  });
  afterAll(async () => {
    await caller?.close();
    await nats?.stop();
  });

  /**
   * The replica that takes the request dies while running it (its connection closes, as a kill -9
   * closes it); a second replica of the queue group is up by then. Returns the caller's outcome and
   * how often each replica ran the request.
   */
  async function replicaDiesMidRequest(endpoint: Endpoint, queue: string) {
    const ran = { doomed: 0, live: 0 };
    const doomed = await connectNats({ url: nats.url, name: `doomed-${queue}` });
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    await serveEndpoints(doomed, { service: 'orchestrator', instanceId: 'doomed', queue, log }, [
      on(endpoint, () => {
        ran.doomed++;
        started();
        return new Promise(() => {}); // dies below before answering
      }),
    ]);
    const t0 = performance.now();
    const pending = request(caller, endpoint, { n: 7 }, { timeoutMs: DEADLINE_MS }).then(
      (r) => ({ ok: true as const, r }),
      (e: unknown) => ({ ok: false as const, e }),
    );
    await running;
    // Only now the survivor joins the group: the first attempt surely went to the doomed one.
    const live = await connectNats({ url: nats.url, name: `live-${queue}` });
    await serveEndpoints(live, { service: 'orchestrator', instanceId: 'live', queue, log }, [
      on(endpoint, async (req) => {
        ran.live++;
        return { n: (req as { n: number }).n, by: 'live' };
      }),
    ]);
    await doomed.close();
    const outcome = await pending;
    const ms = performance.now() - t0;
    await live.close();
    return { outcome, ran, ms };
  }

  it('an idempotent control is answered by the surviving replica, within its deadline, the caller none the wiser', async () => {
    const { outcome, ran, ms } = await replicaDiesMidRequest(control, 'q-control');
    console.info(`[timing] resent control answered after ${ms.toFixed(0)} ms`);
    expect(outcome).toEqual({ ok: true, r: { n: 7, by: 'live' } });
    expect(ran).toEqual({ doomed: 1, live: 1 });
    expect(ms).toBeLessThan(DEADLINE_MS);
  });

  it('a request that is not idempotent is not resent: UNAVAILABLE, as ADR 0044 answers it', async () => {
    const { outcome, ran } = await replicaDiesMidRequest(create, 'q-create');
    expect(outcome.ok).toBe(false);
    expect((outcome as { e: unknown }).e).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/replica is gone/) });
    expect(ran).toEqual({ doomed: 1, live: 0 });
  });

  it('an application error is never resent, even of an idempotent control', async () => {
    const nc = await connectNats({ url: nats.url, name: 'refusing' });
    let ran = 0;
    await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'refusing', queue: 'q-refuse', log }, [
      on(control, async () => {
        ran++;
        const { conflict } = await import('@kandev/contracts');
        throw conflict('no');
      }),
    ]);
    await expect(request(caller, control, { n: 1 }, { timeoutMs: DEADLINE_MS })).rejects.toMatchObject({ code: 'CONFLICT' });
    expect(ran).toBe(1);
    await nc.close();
  });

  it('marks the controls idempotent, and only them', () => {
    const marked = [Orch.taskStop, Orch.agentCancel, OrchMcp.stopChildTask, Tree.pause, Tree.resume, Tree.cancel, Tree.restore];
    for (const e of marked) expect(e.idempotent, e.name).toBe(true);
    // What may apply twice is not: a start, a prompt, a message, a create.
    for (const e of [Orch.sessionStart, Orch.sessionPrompt, OrchMcp.messageTask, Orch.taskCreate]) expect(e.idempotent, e.name).toBeFalsy();
  });
});
