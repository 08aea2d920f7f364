// Registry listings under churn. A `kv.keys()` listing is an ordered push consumer that
// ends when a delivered key says "0 pending" or after an idle heartbeat, which @nats-io/jetstream
// sets to 30 s for ordered consumers. On nats-server 2.9.10, an entry removed after the consumer
// counted it and before it was delivered breaks that: the listing waited 30 s (or as long as other
// keys kept arriving), listed a key several times, or listed nothing at all (a subject purge moves
// the consumer past every key). These tests remove entries while a listing runs, as max age does
// (a message removed without a delete marker) and as a purge does.
import { Buckets, Life, type Execution } from '@kandev/contracts';
import { connectNats, createLogger, DEFAULT_REQUEST_TIMEOUT_MS, on, request, serveEndpoints, type NatsConnection } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import type { Msg, RequestOptions } from '@nats-io/nats-core';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecutionRegistry } from '../src/store/registry.js';
import { executionEntry } from './helpers.js';

const log = createLogger('registry-listing-test', 'silent');
const STREAM = `KV_${Buckets.executions}`;
const subject = (key: string) => `$KV.${Buckets.executions}.${key}`;

let nats: TestNats;
let admin: NatsConnection;

beforeAll(async () => {
  nats = await startNats();
  admin = await connectNats({ url: nats.url, name: 'registry-listing-admin' });
}, 60_000);

afterAll(async () => {
  await admin?.close();
  await nats?.stop();
});

const entry = (taskId: string): Execution => executionEntry(taskId);

const jsApi = async (subj: string, body: unknown): Promise<Record<string, unknown>> => {
  const reply = JSON.parse(new TextDecoder().decode((await admin.request(subj, JSON.stringify(body), { timeout: 5_000 })).data)) as Record<string, unknown>;
  expect(reply).not.toHaveProperty('error');
  return reply;
};

/** Ways an entry leaves the bucket without a delete marker. */
const removals = {
  /** What max age does: the server removes the message (the same store path as a message delete). */
  'ages out': async (key: string) => {
    const got = (await jsApi(`$JS.API.STREAM.MSG.GET.${STREAM}`, { last_by_subj: subject(key) })) as { message: { seq: number } };
    await jsApi(`$JS.API.STREAM.MSG.DELETE.${STREAM}`, { seq: got.message.seq, no_erase: true });
  },
  'is purged': async (key: string) => {
    await jsApi(`$JS.API.STREAM.PURGE.${STREAM}`, { filter: subject(key) });
  },
};

/**
 * A connection whose JetStream API replies are held until `onReply` has run: the fault is
 * injected between two steps of a listing, whatever those steps are, on the real server.
 */
async function interposed(name: string, onReply: (subject: string) => Promise<void>): Promise<NatsConnection> {
  const nc = await connectNats({ url: nats.url, name });
  const send = nc.request.bind(nc);
  nc.request = async (subj: string, payload?: Parameters<NatsConnection['request']>[1], opts?: RequestOptions): Promise<Msg> => {
    const reply = await send(subj, payload, opts);
    if (subj.startsWith('$JS.API.')) await onReply(subj);
    return reply;
  };
  return nc;
}

describe('registry listing', () => {
  it.each(Object.keys(removals) as Array<keyof typeof removals>)(
    'answers at once, with what is still there, when an entry %s while it runs',
    async (how) => {
      const task = randomUUID();
      const writer = await ExecutionRegistry.open(admin, 60_000, log);
      const entries = [entry(task), entry(task), entry(task), entry(task)];
      for (const e of entries) await writer.put(e);

      // After each JetStream API reply the listing gets, one more entry ages out (the last one
      // stays): the first listing step sees entries that the next steps no longer find.
      const doomed = entries.slice(1).map((e) => e.execution_id);
      let armed = false;
      const nc = await interposed('registry-listing-aged', async () => {
        const next = armed ? doomed.shift() : undefined;
        if (next) await removals[how](`${task}.${next}`);
      });
      try {
        const registry = await ExecutionRegistry.open(nc, 60_000, log);
        armed = true;
        const started = performance.now();
        const listed = await registry.listForTask(task);
        const took = performance.now() - started;
        armed = false;

        // Bounded by the listing's own budget, which it must not even need: the old `kv.keys()`
        // listing waited 30 s here.
        expect(took).toBeLessThan(DEFAULT_REQUEST_TIMEOUT_MS);
        expect(doomed.length).toBeLessThan(entries.length - 1); // the fault was injected mid-listing
        // Correct: the entry that stayed is listed, each entry once, nothing that was never there.
        const ids = listed.map((e) => e.execution_id);
        expect(ids).toContain(entries[0]!.execution_id);
        expect(new Set(ids).size).toBe(ids.length);
        expect(entries.map((e) => e.execution_id)).toEqual(expect.arrayContaining(ids));
      } finally {
        await nc.close();
      }
    },
    60_000,
  );

  it('stays bounded and complete under churn: puts, deletes, purges and max-age expiry', async () => {
    // A bucket of its own with a short max age, so entries keep ageing out during the listings.
    const churnNats = await startNats();
    const nc = await connectNats({ url: churnNats.url, name: 'registry-listing-churn' });
    const TTL_MS = 2_000;
    // The stable entries are re-put well within the TTL, so a slow event loop cannot let them lapse.
    const REFRESH_MS = TTL_MS / 5;
    const registry = await ExecutionRegistry.open(nc, TTL_MS, log);
    const task = randomUUID();
    // Re-put like an owner does: always live, so every listing must include them.
    const stable = [entry(task), entry(task), entry(task)];
    for (const e of stable) await registry.put(e);
    let churning = true;
    const refresher = (async () => {
      while (churning) {
        await new Promise((r) => setTimeout(r, REFRESH_MS));
        await Promise.all(stable.map((e) => registry.put(e)));
      }
    })();
    // Entries put once and then deleted, purged or left to age out.
    let n = 0;
    const churner = (async () => {
      while (churning) {
        const e = entry(task);
        await registry.put(e);
        n++;
        if (n % 3 === 0) await registry.delete(e.execution_id, task);
        else if (n % 3 === 1) await nc.request(`$JS.API.STREAM.PURGE.${STREAM}`, JSON.stringify({ filter: subject(`${task}.${e.execution_id}`) }));
        // else: ages out after TTL_MS
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    try {
      // Listings until entries have been ageing out under them for a while (three TTLs), and at
      // least LISTINGS of them however slow the machine is.
      const LISTINGS = 100;
      const begun = performance.now();
      let slowest = 0;
      for (let i = 0; i < LISTINGS || performance.now() - begun < 3 * TTL_MS; i++) {
        const started = performance.now();
        const listed = await registry.listForTask(task);
        slowest = Math.max(slowest, performance.now() - started);
        expect(listed.map((e) => e.execution_id)).toEqual(expect.arrayContaining(stable.map((e) => e.execution_id)));
        if (i % 10 === 0) await new Promise((r) => setTimeout(r, TTL_MS / 10));
      }
      expect(slowest).toBeLessThan(DEFAULT_REQUEST_TIMEOUT_MS);
      expect(n).toBeGreaterThan(LISTINGS / 10); // there was churn to list through
      // A listing leaves nothing on the server. Each kv.keys() left an ephemeral consumer for its
      // 5 min inactivity threshold, and every registry put is matched against every consumer.
      const info = JSON.parse(new TextDecoder().decode((await nc.request(`$JS.API.STREAM.INFO.${STREAM}`, '', { timeout: 5_000 })).data)) as {
        state: { consumer_count: number };
      };
      expect(info.state.consumer_count).toBe(0);
    } finally {
      churning = false;
      await Promise.all([refresher, churner]);
      await nc.close();
      await churnNats.stop();
    }
  }, 120_000);

  it("finds an execution without its task id, and lists every task's entries", async () => {
    const registry = await ExecutionRegistry.open(admin, 60_000, log);
    const [a, b] = [entry(randomUUID()), entry(randomUUID())];
    await registry.put(a);
    await registry.put(b);
    await registry.delete(b.execution_id); // a delete marker: listed by the server, read as gone
    expect(await registry.get(a.execution_id)).toEqual(a);
    expect(await registry.get(b.execution_id)).toBeNull();
    const all = (await registry.all()).map((e) => e.execution_id);
    expect(all).toContain(a.execution_id);
    expect(all).not.toContain(b.execution_id);
  });

  it.each([
    ['a few tasks, one filtered listing each', 3, 3],
    ['many tasks (a tree hold), one listing of the bucket', 12, 1],
  ])("lists the executions of %s: each task's entries in order, nothing of another task", async (_title, tasks, listings) => {
    const writer = await ExecutionRegistry.open(admin, 60_000, log);
    const taskIds = Array.from({ length: tasks }, () => randomUUID());
    const expected: string[] = [];
    for (const task of taskIds) {
      for (let i = 0; i < 2; i++) {
        const e = { ...entry(task), started_at: new Date(Date.now() + i).toISOString() };
        await writer.put(e);
        expected.push(e.execution_id);
      }
    }
    const other = entry(randomUUID());
    await writer.put(other);
    const gone = entry(taskIds[0]!);
    await writer.put(gone);
    await writer.delete(gone.execution_id);

    const infos: string[] = [];
    const nc = await interposed('registry-listing-tasks', async (subj) => {
      if (subj.startsWith('$JS.API.STREAM.INFO.')) infos.push(subj);
    });
    try {
      const registry = await ExecutionRegistry.open(nc, 60_000, log);
      infos.length = 0;
      const listed = await registry.listForTasks(taskIds);
      expect(listed.map((e) => e.execution_id)).toEqual(expected);
      expect(infos).toHaveLength(listings);
    } finally {
      await nc.close();
    }
  });

  it('fails whole with UNAVAILABLE when it cannot finish within its caller deadline, never with part of the list', async () => {
    const task = randomUUID();
    const writer = await ExecutionRegistry.open(admin, 60_000, log);
    for (let i = 0; i < 3; i++) await writer.put(entry(task));
    // Reads of the entries are slow: each direct read is answered 1.5 s late.
    const slowMs = 1_500;
    const nc = await interposed('registry-listing-slow', async (subj) => {
      if (subj.startsWith('$JS.API.DIRECT.GET.')) await new Promise((r) => setTimeout(r, slowMs));
    });
    const outcomes: unknown[] = [];
    try {
      const registry = await ExecutionRegistry.open(nc, 60_000, log);
      await serveEndpoints(nc, { service: 'lifecycle-listing-test', instanceId: 'listing-test', queue: 'listing-test', log }, [
        on(Life.list, async (req) => {
          try {
            const listed = await registry.listForTask(req.task_id);
            outcomes.push(listed);
            return listed;
          } catch (e) {
            outcomes.push(e);
            throw e;
          }
        }),
      ]);
      await nc.flush();
      const budgetMs = 500;
      const answer = await request(admin, Life.list, { task_id: task }, { timeoutMs: budgetMs }).then(
        (v) => ({ listed: v }),
        (e: { code?: string }) => e,
      );
      expect(answer).toMatchObject({ code: 'UNAVAILABLE' });
      // The handler itself gave up at the caller's deadline instead of answering late with a list.
      await expect.poll(() => outcomes.length, { timeout: slowMs * 2 }).toBe(1);
      expect(outcomes[0]).toMatchObject({ code: 'UNAVAILABLE' });
    } finally {
      await nc.close();
    }
  }, 60_000);
});
