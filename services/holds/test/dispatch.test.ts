import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import postgres from 'postgres';
import { Holds, OrchTree, type Hold, type OperatorActor } from '@kandev/contracts';
import { connectNats, createLogger, on, request, serveEndpoints, startService, type NatsConnection, type RunningService } from '@kandev/runtime';
import { createTestDatabase, eventually, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import { holdsService } from '../src/service.js';

/**
 * The holds service with its real schema on real NATS and PostgreSQL, two replicas of it, and the
 * orchestrator faked at the subject level (it answers lineage and records every launch).
 */
const operator: OperatorActor = { type: 'operator', id: 'op', workspaces: ['*'] };
const workspace = randomUUID();
let nats: TestNats;
let db: TestDatabase;
let replicas: RunningService[];
let nc: NatsConnection;
let sql: postgres.Sql;
const launches = new Map<string, number>();
/** Tasks the fake orchestrator refuses to launch because of a hold (as its row-locked check would). */
const refused = new Map<string, 'pause' | 'cancel'>();
/** Tasks the fake orchestrator refuses by the start rule with its own reason (a CANCELLED task, R-10.1). */
const refusedFor = new Map<string, string>();
/** Tasks whose launch takes longer than the claim timeout (as a launch behind a busy lifecycle can). */
const slow = new Set<string>();
/**
 * Short, so the tests see claims go stale; a launch in flight renews its claim three times per period.
 * Not shorter: the replicas share this test's event loop, and a stall of that loop longer than two
 * thirds of the timeout lets the other replica take a claim whose launch is still running and ask
 * for it again (the real orchestrator's launch is keyed by wakeup id and launches once; the fake
 * here counts every ask, which is what these tests check). At 2 s, a starved test lane on a busy
 * 2-core runner asked for one of 120 wakeups three times.
 */
const CLAIM_TIMEOUT_MS = 5_000;

beforeAll(async () => {
  [nats, db] = await Promise.all([startNats(), createTestDatabase()]);
  nc = await connectNats({ url: nats.url, name: 'holds-test' });
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'orch-fake', queue: 'orchestrator', log: createLogger('fake-orch', 'silent') }, [
    on(OrchTree.lineage, async (req) => [{ id: req.task_id, workspace_id: workspace, parent_id: null }]),
    on(OrchTree.wakeupLaunch, async (req) => {
      launches.set(req.wakeup_id, (launches.get(req.wakeup_id) ?? 0) + 1);
      const mode = refused.get(req.task_id);
      if (mode) return { launched: false as const, hold_mode: mode, reason: 'held' };
      const skip = refusedFor.get(req.task_id);
      if (skip) return { launched: false as const, hold_mode: null, reason: 'refused by the start rule', skip_reason: skip };
      // A launch takes a while: replicas polling meanwhile must not take the same wakeup.
      await new Promise((r) => setTimeout(r, slow.has(req.task_id) ? 2 * CLAIM_TIMEOUT_MS : 5));
      return { launched: true as const, session_id: randomUUID() };
    }),
  ]);
  const env = (i: number) => ({
    ...process.env,
    NATS_URL: nats.url,
    DATABASE_URL: db.url,
    LOG_LEVEL: 'silent',
    INSTANCE_ID: `holds-${i}`,
    WAKEUP_POLL_MS: '20',
    WAKEUP_BATCH: '7',
    WAKEUP_CLAIM_TIMEOUT_MS: String(CLAIM_TIMEOUT_MS),
  });
  replicas = [await startService(holdsService, env(1)), await startService(holdsService, env(2))];
  sql = postgres(db.url, { max: 2, onnotice: () => undefined });
});
afterAll(async () => {
  await sql?.end();
  for (const r of replicas ?? []) await r.stop();
  await nc?.close();
  await Promise.all([nats?.stop(), db?.drop()]);
});

// A generous deadline: 120 creates at once reach two replicas that share this test's event loop,
// and on a starved CI lane (both cores taken by work at a higher priority) the default 5 s ran out.
// What these tests check is how often a wakeup launches, not how fast it is created.
const wakeup = (task_id: string, extra: Record<string, unknown> = {}) =>
  request(nc, Holds.wakeupCreate, { actor: operator, task_id, reason: 'test', ...extra }, { timeoutMs: 30_000 });
const settled = (id: string) =>
  eventually(async () => {
    const w = await request(nc, Holds.wakeupGet, { actor: operator, wakeup_id: id });
    return w.status === 'finished' || w.status === 'cancelled' ? w : null;
  }, 20_000);

function holdOf(taskIds: string[], mode: 'pause' | 'cancel', released = false): Hold {
  const now = new Date().toISOString();
  return {
    id: randomUUID(),
    workspace_id: workspace,
    root_task_id: taskIds[0]!,
    mode,
    created_by: 'operator:op',
    reason: null,
    created_at: now,
    released_at: released ? now : null,
    released_by: released ? 'operator:op' : null,
    released_reason: null,
    members: taskIds.map((task_id, depth) => ({ task_id, depth, task_status: 'IN_PROGRESS' as const, skip_reason: null })),
  };
}

describe('wakeup dispatch', () => {
  it('two dispatcher replicas launch each of 120 wakeups exactly once', async () => {
    const tasks = Array.from({ length: 12 }, () => randomUUID());
    const created = await Promise.all(Array.from({ length: 120 }, (_, i) => wakeup(tasks[i % tasks.length]!)));
    const done = await Promise.all(created.map((w) => settled(w.id)));
    expect(done.every((w) => w.status === 'finished' && w.skip_reason === null && w.session_id)).toBe(true);
    expect(created.map((w) => launches.get(w.id))).toEqual(created.map(() => 1));
  });

  it('a launch that outlasts the claim timeout is not taken by the other replica: its dispatcher renews the claim', async () => {
    const task = randomUUID();
    slow.add(task);
    const w = await wakeup(task);
    const done = await settled(w.id);
    expect(done).toMatchObject({ status: 'finished', skip_reason: null });
    expect(launches.get(w.id)).toBe(1);
  });

  it('a claim whose dispatcher is gone goes back to the queue within the claim timeout, and is launched', async () => {
    const id = randomUUID();
    // Claimed by a dispatcher that died right after: nobody renews it.
    await sql`INSERT INTO holds.wakeups (id, task_id, workspace_id, reason, status, claimed_at, attempts) VALUES (${id}, ${randomUUID()}, ${workspace}, 'orphaned claim', 'claimed', now(), 1)`;
    const started = Date.now();
    expect(await settled(id)).toMatchObject({ status: 'finished', skip_reason: null });
    expect(launches.get(id)).toBe(1);
    expect(Date.now() - started).toBeLessThan(CLAIM_TIMEOUT_MS + 5_000);
  });

  it('gates a held task in the claim itself: finished with the hold reason and no launch asked', async () => {
    const [root, kid] = [randomUUID(), randomUUID()];
    const hold = holdOf([root, kid], 'pause');
    await request(nc, Holds.holdApplied, { hold });
    const w = await wakeup(kid);
    expect(await settled(w.id)).toMatchObject({ status: 'finished', skip_reason: 'tree_paused', session_id: null });
    expect(launches.has(w.id)).toBe(false);
    const [gate] = await sql`SELECT mode FROM holds.held_tasks WHERE task_id = ${kid}`;
    expect(gate).toEqual({ mode: 'pause' });
  });

  it('cancels a claimed wakeup of a member when a hold applies, and is idempotent', async () => {
    const task = randomUUID();
    // Inserted straight into the queue so no dispatcher round can take it before the hold applies.
    const id = randomUUID();
    await sql`INSERT INTO holds.wakeups (id, task_id, workspace_id, reason, status) VALUES (${id}, ${task}, ${workspace}, 'queued', 'claimed')`;
    const hold = holdOf([task], 'cancel');
    expect(await request(nc, Holds.holdApplied, { hold })).toEqual({ cancelled_wakeups: 1 });
    expect(await request(nc, Holds.holdApplied, { hold })).toEqual({ cancelled_wakeups: 0 });
    expect(await request(nc, Holds.wakeupGet, { actor: operator, wakeup_id: id })).toMatchObject({ status: 'cancelled', skip_reason: 'tree_cancelled' });
  });

  it("cancels a wakeup requested in the hold's millisecond: the hold's created_at travels in whole milliseconds", async () => {
    const task = randomUUID();
    const hold = holdOf([task], 'cancel');
    // 0.4 ms into the millisecond the hold's created_at names: possibly before the hold was created
    // (added in SQL: a timestamp parameter would lose its microseconds to a JavaScript Date). Claimed,
    // as above, so that no dispatcher round takes it before the hold applies.
    const id = randomUUID();
    await sql`INSERT INTO holds.wakeups (id, task_id, workspace_id, reason, status, requested_at)
              VALUES (${id}, ${task}, ${workspace}, 'queued', 'claimed', ${hold.created_at}::timestamptz + interval '400 microseconds')`;
    const [row] = await sql`SELECT extract(microseconds FROM requested_at)::int % 1000 AS us FROM holds.wakeups WHERE id = ${id}`;
    expect(row).toEqual({ us: 400 });
    expect(await request(nc, Holds.holdApplied, { hold })).toEqual({ cancelled_wakeups: 1 });
    expect(await request(nc, Holds.wakeupGet, { actor: operator, wakeup_id: id })).toMatchObject({ status: 'cancelled', skip_reason: 'tree_cancelled' });
  });

  it('a late "applied" (after the pause answered) leaves a wakeup requested since to the gate: finished, not cancelled', async () => {
    const task = randomUUID();
    // Created a minute ago; its application arrives only now, after a wakeup was posted for a member.
    const hold = { ...holdOf([task], 'pause'), created_at: new Date(Date.now() - 60_000).toISOString() };
    // Due in a moment, so no dispatcher round takes it before the hold applies.
    const w = await wakeup(task, { run_at: new Date(Date.now() + 1_000).toISOString() });
    expect(await request(nc, Holds.holdApplied, { hold })).toEqual({ cancelled_wakeups: 0 });
    expect(await settled(w.id)).toMatchObject({ status: 'finished', skip_reason: 'tree_paused', session_id: null });
    expect(launches.has(w.id)).toBe(false);
  });

  it('a released hold is a tombstone: a late or redelivered "applied" gates nothing', async () => {
    const task = randomUUID();
    const hold = holdOf([task], 'pause');
    await request(nc, Holds.holdApplied, { hold });
    expect(await request(nc, Holds.holdReleased, { hold: { ...hold, released_at: new Date().toISOString() } })).toEqual({ released: true });
    await request(nc, Holds.holdApplied, { hold });
    const w = await wakeup(task);
    expect(await settled(w.id)).toMatchObject({ status: 'finished', skip_reason: null });
    expect(launches.get(w.id)).toBe(1);
  });

  it('records the hold reason when the orchestrator refuses a launch the gate did not know of yet', async () => {
    const task = randomUUID();
    refused.set(task, 'cancel');
    const w = await wakeup(task);
    expect(await settled(w.id)).toMatchObject({ status: 'finished', skip_reason: 'tree_cancelled', session_id: null });
  });

  it("records the start rule's reason when the orchestrator gives one: a CANCELLED task's wakeup is finished task_cancelled (R-10.1)", async () => {
    const task = randomUUID();
    refusedFor.set(task, 'task_cancelled');
    const w = await wakeup(task);
    expect(await settled(w.id)).toMatchObject({ status: 'finished', skip_reason: 'task_cancelled', session_id: null });
    expect(launches.get(w.id)).toBe(1);
  });

  it('does not dispatch a scheduled wakeup before its run_at, and does after', async () => {
    const runAt = Date.now() + 1_500;
    const w = await wakeup(randomUUID(), { run_at: new Date(runAt).toISOString() });
    expect(w.run_at).toBeTruthy();
    // Polled well inside the window: many dispatcher rounds (every 20 ms) pass without taking it.
    while (Date.now() < runAt - 300) {
      expect((await request(nc, Holds.wakeupGet, { actor: operator, wakeup_id: w.id })).status).toBe('queued');
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await settled(w.id)).toMatchObject({ status: 'finished', skip_reason: null });
    expect(launches.get(w.id)).toBe(1);
  });

  it('returns the same wakeup for the same idempotency key on the same task only', async () => {
    const [t1, t2] = [randomUUID(), randomUUID()];
    const a = await wakeup(t1, { idempotency_key: 'same' });
    const b = await wakeup(t1, { idempotency_key: 'same' });
    const c = await wakeup(t2, { idempotency_key: 'same' });
    expect(b.id).toBe(a.id);
    expect(c.id).not.toBe(a.id);
    expect(c.task_id).toBe(t2);
  });
});

describe('cost events', () => {
  it('counts a usage_event_id once and sums a task tree through its rollups', async () => {
    const task = randomUUID();
    const input = { actor: operator, task_id: task, usage_event_id: `u-${task}`, cost_cents: 12.5, tokens_in: 100, tokens_cached_in: 20, tokens_out: 30 };
    expect(await request(nc, Holds.costRecord, input)).toMatchObject({ duplicate: false, cost_cents: 12.5 });
    expect(await request(nc, Holds.costRecord, input)).toMatchObject({ duplicate: true });
    await request(nc, Holds.costRecord, { ...input, usage_event_id: `v-${task}`, cost_cents: 0.5 });
    // A model without a price: its tokens count, at cost 0, and the summary says so.
    expect(
      await request(nc, Holds.costRecord, {
        ...input,
        usage_event_id: `w-${task}`,
        cost_cents: 0,
        tokens_in: 1,
        tokens_cached_in: 0,
        tokens_out: 0,
        priced: false,
      }),
    ).toMatchObject({ priced: false });
    expect(await request(nc, Holds.costSummary, { actor: operator, task_id: task })).toEqual({
      task_id: task,
      task_count: 1,
      include_descendants: true,
      cost_cents: 13,
      tokens_in: 201,
      tokens_cached_in: 40,
      tokens_out: 60,
      unpriced_events: 1,
    });
    const [rollup] = await sql`SELECT events::int FROM holds.task_costs WHERE task_id = ${task}`;
    expect(rollup).toEqual({ events: 3 });
  });
});
