import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Budget, EventEnvelope, Holds, KandevError, OrchBudget, OrchTree, unavailable, type OperatorActor, type RequestOf } from '@kandev/contracts';
import { connectNats, createLogger, on, request, serveEndpoints, startService, type NatsConnection, type RunningService } from '@kandev/runtime';
import { createTestDatabase, eventually, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import { budgetState, crossingsBetween, evaluateBudget, recordCrossings } from '../src/domain/budget.js';
import { holdsService } from '../src/service.js';

/**
 * B-8 in the holds service: budgets on real NATS and PostgreSQL, two replicas of the service, and
 * the orchestrator faked at the subject level (it answers lineage and records every crossing it is
 * told of, answering a hold id as the real one does).
 */
const operator: OperatorActor = { type: 'operator', id: 'op', workspaces: ['*'] };
const workspace = randomUUID();
let nats: TestNats;
let db: TestDatabase;
let replicas: RunningService[];
let nc: NatsConnection;
/** task id → its parent (null for a root): the fake orchestrator's tree. */
const parents = new Map<string, string | null>();
type Crossed = RequestOf<typeof OrchBudget.crossed>;
const crossed: Crossed[] = [];
/** Roots whose next crossing report fails (the orchestrator unreachable): the sweeper must retry it. */
const failNext = new Set<string>();
/** The hold id the fake answers per key (one per key, as the real one's idempotency makes it). */
const holdsByKey = new Map<string, string>();
const events: EventEnvelope[] = [];

function lineage(taskId: string) {
  const chain: Array<{ id: string; workspace_id: string; parent_id: string | null }> = [];
  for (let id: string | null = taskId; id; id = parents.get(id) ?? null) chain.unshift({ id, workspace_id: workspace, parent_id: parents.get(id) ?? null });
  return chain;
}

beforeAll(async () => {
  [nats, db] = await Promise.all([startNats(), createTestDatabase()]);
  nc = await connectNats({ url: nats.url, name: 'holds-budget-test' });
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'orch-fake', queue: 'orchestrator', log: createLogger('fake-orch', 'silent') }, [
    on(OrchTree.lineage, async (req) => lineage(req.task_id)),
    on(OrchBudget.crossed, async (req) => {
      crossed.push(req);
      if (failNext.delete(req.task_id)) throw unavailable('orchestrator away');
      if (req.crossing === 'warned') return { hold_id: null };
      if (!holdsByKey.has(req.key)) holdsByKey.set(req.key, randomUUID());
      return { hold_id: holdsByKey.get(req.key)! };
    }),
  ]);
  const sub = nc.subscribe('kandev.evt.tree_budget.>');
  void (async () => {
    for await (const m of sub) events.push(EventEnvelope.parse(JSON.parse(new TextDecoder().decode(m.data))) as EventEnvelope);
  })();
  const env = (i: number) => ({
    ...process.env,
    NATS_URL: nats.url,
    DATABASE_URL: db.url,
    LOG_LEVEL: 'silent',
    INSTANCE_ID: `holds-b${i}`,
    BUDGET_SWEEP_MS: '200',
    BUDGET_CROSSING_RETRY_MS: '500',
  });
  replicas = [await startService(holdsService, env(1)), await startService(holdsService, env(2))];
});
afterAll(async () => {
  for (const r of replicas ?? []) await r.stop();
  await nc?.close();
  await Promise.all([nats?.stop(), db?.drop()]);
});

function tree(): { root: string; a: string; b: string } {
  const root = randomUUID();
  const a = randomUUID();
  const b = randomUUID();
  parents.set(root, null);
  parents.set(a, root);
  parents.set(b, a);
  return { root, a, b };
}
// Generous: many requests at once reach two replicas that share this test's event loop.
const T = { timeoutMs: 30_000 };
const cost = (task_id: string, cents: number) =>
  request(
    nc,
    Holds.costRecord,
    { actor: operator, task_id, usage_event_id: randomUUID(), cost_cents: cents, tokens_in: 1, tokens_cached_in: 0, tokens_out: 1 },
    T,
  );
const put = (task_id: string, limit_cents: number, warn_percent?: number) =>
  request(nc, Budget.set, { actor: operator, task_id, limit_cents, ...(warn_percent ? { warn_percent } : {}) }, T);
const get = (task_id: string) => request(nc, Budget.get, { actor: operator, task_id }, T);
const crossingsOf = (root: string, crossing: 'warned' | 'exceeded') => crossed.filter((c) => c.task_id === root && c.crossing === crossing);
const eventsOf = (root: string, type: string) => events.filter((e) => e.task_id === root && e.type === type);
const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => 'OK',
    (e: KandevError) => e.code,
  );

describe('budget state (domain)', () => {
  it('is ok below the warning, warned from warn_percent of the cap, exceeded at the cap', () => {
    expect(budgetState(0, 1000, 80)).toBe('ok');
    expect(budgetState(799.99, 1000, 80)).toBe('ok');
    expect(budgetState(800, 1000, 80)).toBe('warned');
    expect(budgetState(999.99, 1000, 80)).toBe('warned');
    expect(budgetState(1000, 1000, 80)).toBe('exceeded');
    expect(budgetState(5000, 1000, 80)).toBe('exceeded');
    // 100 %: the warning is the cap.
    expect(budgetState(999, 1000, 100)).toBe('ok');
    expect(budgetState(1000, 1000, 100)).toBe('exceeded');
  });
  it('crosses once: into warned from ok, into exceeded from below (from ok: warned first); falling back or staying is no crossing', () => {
    expect(crossingsBetween('ok', 'warned')).toEqual(['warned']);
    expect(crossingsBetween('ok', 'exceeded')).toEqual(['warned', 'exceeded']);
    expect(crossingsBetween('warned', 'exceeded')).toEqual(['exceeded']);
    for (const [before, after] of [
      ['warned', 'warned'],
      ['exceeded', 'exceeded'],
      ['exceeded', 'warned'],
      ['exceeded', 'ok'],
      ['warned', 'ok'],
      ['ok', 'ok'],
    ] as const)
      expect(crossingsBetween(before, after)).toEqual([]);
    expect(evaluateBudget('exceeded', 1200, 2000, 50)).toEqual({ state: 'warned', crossings: [] });
    expect(evaluateBudget('ok', 2000, 2000, 50)).toEqual({ state: 'exceeded', crossings: ['warned', 'exceeded'] });
  });
  it("keeps a warning to report before the cap: the jump's own, or one still unreported, under the key it was made with", () => {
    const settled = { crossing_seq: 4, pending: null, warning_seq: null };
    // A jump: two sequence numbers, the warning's first.
    expect(recordCrossings(settled, ['warned', 'exceeded'])).toEqual({ crossing_seq: 6, pending: 'exceeded', warning_seq: 5 });
    expect(recordCrossings(settled, ['warned'])).toEqual({ crossing_seq: 5, pending: 'warned', warning_seq: null });
    // The warning was reported (settled): the cap alone.
    expect(recordCrossings(settled, ['exceeded'])).toEqual({ crossing_seq: 5, pending: 'exceeded', warning_seq: null });
    // The warning (seq 5) not yet reported when the cap is reached: reported first, still as 5.
    expect(recordCrossings({ crossing_seq: 5, pending: 'warned', warning_seq: null }, ['exceeded'])).toEqual({
      crossing_seq: 6,
      pending: 'exceeded',
      warning_seq: 5,
    });
    // A cap reached again (after a raise) before the first one was reported keeps that one's warning.
    expect(recordCrossings({ crossing_seq: 6, pending: 'exceeded', warning_seq: 5 }, ['exceeded'])).toEqual({
      crossing_seq: 7,
      pending: 'exceeded',
      warning_seq: 5,
    });
  });
});

describe('budgets', () => {
  it('is set on a root only, read back with the tree spend, 404 when none, deleted idempotently', async () => {
    const { root, a, b } = tree();
    expect(await codeOf(get(root))).toBe('NOT_FOUND');
    const err = await put(a, 100).catch((e: KandevError) => e);
    expect(err).toMatchObject({ code: 'VALIDATION_ERROR' });
    await cost(b, 7);
    const set = await put(root, 1000);
    expect(set).toEqual({ task_id: root, limit_cents: 1000, warn_percent: 80, spent_cents: 7, state: 'ok', hold_id: null });
    expect(await get(root)).toEqual(set);
    const summary = await request(nc, Holds.costSummary, { actor: operator, task_id: root });
    expect(summary).toMatchObject({ cost_cents: 7, budget: set });
    expect((await request(nc, Holds.costSummary, { actor: operator, task_id: a })).budget).toBeUndefined();
    // Another workspace's operator sees nothing of it.
    expect(await codeOf(request(nc, Budget.get, { actor: { ...operator, workspaces: [randomUUID()] }, task_id: root }))).toBe('NOT_FOUND');
    expect(await request(nc, Budget.remove, { actor: operator, task_id: root })).toEqual({ deleted: true });
    expect(await request(nc, Budget.remove, { actor: operator, task_id: root })).toEqual({ deleted: false });
    expect(await codeOf(get(root))).toBe('NOT_FOUND');
    // Out-of-range input is the contract's VALIDATION_ERROR before anything.
    expect(await codeOf(put(root, 0))).toBe('VALIDATION_ERROR');
    expect(await codeOf(put(root, 100, 101))).toBe('VALIDATION_ERROR');
  });

  it('warns once at warn_percent (event + one report to the orchestrator for its audit row)', async () => {
    const { root, b } = tree();
    await put(root, 1000, 50);
    await cost(b, 400);
    expect((await get(root)).state).toBe('ok');
    await cost(b, 100);
    expect(await get(root)).toMatchObject({ state: 'warned', spent_cents: 500 });
    await cost(b, 100);
    // One crossing, one key; its report may be sent twice (the sweeper's retry of a report still in
    // flight on a loaded loop), which the orchestrator acts on once.
    await eventually(async () => crossingsOf(root, 'warned').length >= 1 && eventsOf(root, 'tree_budget.warned').length === 1, 10_000);
    expect(new Set(crossingsOf(root, 'warned').map((c) => c.key)).size).toBe(1);
    expect(eventsOf(root, 'tree_budget.warned')[0]!.data).toMatchObject({ task_id: root, state: 'warned', spent_cents: 500, limit_cents: 1000 });
  });

  it('exactly once across replicas: 20 concurrent cost events across the cap make one crossing, one hold and one exceeded event', async () => {
    const { root, a, b } = tree();
    await put(root, 1000);
    await cost(a, 900); // warned
    await Promise.all(Array.from({ length: 20 }, (_, i) => cost(i % 2 ? a : b, 10)));
    const budget = await eventually(async () => {
      const x = await get(root);
      return x.hold_id ? x : null;
    }, 15_000);
    expect(budget).toMatchObject({ state: 'exceeded', spent_cents: 1100 });
    // One crossing, one key. A report may be sent twice (the sweeper's retry of a report still in
    // flight on this loaded loop); the orchestrator acts once per key, so that is still one hold.
    const keys = new Set(crossingsOf(root, 'exceeded').map((c) => c.key));
    expect([...keys]).toHaveLength(1);
    expect(budget.hold_id).toBe(holdsByKey.get([...keys][0]!));
    await eventually(async () => eventsOf(root, 'tree_budget.exceeded').length === 1, 10_000);
    expect(eventsOf(root, 'tree_budget.exceeded')[0]!.data).toMatchObject({ task_id: root, state: 'exceeded', hold_id: budget.hold_id });
    // Cost keeps counting while exceeded; no further crossing.
    await cost(b, 50);
    expect(await get(root)).toMatchObject({ state: 'exceeded', spent_cents: 1150 });
    expect(new Set(crossingsOf(root, 'exceeded').map((c) => c.key)).size).toBe(1);
  });

  it('a raised cap lifts the state; a cap set below the spend pauses at once (a new crossing); a release clears the hold', async () => {
    const { root, b } = tree();
    await put(root, 100);
    await cost(b, 150);
    const first = await eventually(async () => {
      const x = await get(root);
      return x.hold_id ? x : null;
    }, 15_000);
    const raised = await put(root, 1000);
    expect(raised).toMatchObject({ state: 'ok', hold_id: first.hold_id, spent_cents: 150 });
    // Lowered below the spend: the PUT itself reports the crossing and answers with its hold.
    const lowered = await put(root, 120);
    expect(lowered.state).toBe('exceeded');
    const keys = crossingsOf(root, 'exceeded').map((c) => c.key);
    expect(keys).toHaveLength(2);
    expect(new Set(keys).size).toBe(2);
    expect(lowered.hold_id).toBe(holdsByKey.get(keys[1]!));
    // The orchestrator released that hold: the budget has no hold any more.
    await request(nc, Holds.holdReleased, {
      hold: {
        id: lowered.hold_id!,
        workspace_id: workspace,
        root_task_id: root,
        mode: 'pause',
        created_by: 'budget',
        reason: 'budget_exceeded',
        created_at: new Date().toISOString(),
        released_at: new Date().toISOString(),
        released_by: 'operator:op',
        released_reason: null,
        members: [],
      },
    });
    expect((await get(root)).hold_id).toBeNull();
  });

  it('a crossing whose report failed is retried by the sweeper and acted on once', async () => {
    const { root, b } = tree();
    await put(root, 100);
    failNext.add(root);
    await cost(b, 100);
    const budget = await eventually(async () => {
      const x = await get(root);
      return x.hold_id ? x : null;
    }, 15_000);
    // From ok past the cap: the warning is reported first; its report failed, so the cap's was not
    // sent either, until the sweeper reported both again.
    const warnings = crossingsOf(root, 'warned');
    expect(warnings.length).toBeGreaterThanOrEqual(2); // the failed one, then the sweeper's
    expect(new Set(warnings.map((r) => r.key)).size).toBe(1); // one crossing, one key
    const reports = crossingsOf(root, 'exceeded');
    expect(new Set(reports.map((r) => r.key)).size).toBe(1);
    expect(budget.hold_id).toBe(holdsByKey.get(reports[0]!.key));
    await eventually(async () => eventsOf(root, 'tree_budget.exceeded').length === 1, 10_000);
  });
  it('an event from below the warning past the cap: warned, then exceeded, in order, once each (audit reports and notifications)', async () => {
    const { root, b } = tree();
    await put(root, 1000); // warns at 800
    await cost(b, 100);
    await cost(b, 1500);
    const budget = await eventually(async () => {
      const x = await get(root);
      return x.hold_id ? x : null;
    }, 15_000);
    expect(budget).toMatchObject({ state: 'exceeded', spent_cents: 1600 });
    await eventually(async () => eventsOf(root, 'tree_budget.exceeded').length === 1, 10_000);
    // The orchestrator was told of the warning before the cap, each under its own key.
    const reports = crossed.filter((c) => c.task_id === root);
    const warnKeys = new Set(crossingsOf(root, 'warned').map((c) => c.key));
    const capKeys = new Set(crossingsOf(root, 'exceeded').map((c) => c.key));
    expect(warnKeys.size).toBe(1);
    expect(capKeys.size).toBe(1);
    expect([...warnKeys][0]).not.toBe([...capKeys][0]);
    expect(reports[0]!.crossing).toBe('warned');
    expect(reports.findIndex((c) => c.crossing === 'exceeded')).toBeGreaterThan(reports.findIndex((c) => c.crossing === 'warned'));
    // One notification of each, the warning first.
    const sent = events.filter((e) => e.task_id === root).map((e) => e.type);
    expect(sent).toEqual(['tree_budget.warned', 'tree_budget.exceeded']);
    // More spend: no new crossing (a sweeper's late resend of these two keys is not one).
    await cost(b, 10);
    expect(new Set(crossed.filter((c) => c.task_id === root).map((c) => c.key)).size).toBe(2);
  });

  it('a warning still unreported when the cap is reached is reported before it, under its own key, once', async () => {
    const { root, b } = tree();
    await put(root, 1000);
    failNext.add(root); // the warning's report fails: it stays pending
    await cost(b, 850);
    await eventually(async () => crossingsOf(root, 'warned').length === 1, 10_000);
    await cost(b, 200); // the cap, with the warning still pending
    await eventually(async () => (await get(root)).hold_id, 15_000);
    const warnKeys = crossingsOf(root, 'warned').map((c) => c.key);
    expect(new Set(warnKeys).size).toBe(1);
    const reports = crossed.filter((c) => c.task_id === root);
    const firstCap = reports.findIndex((c) => c.crossing === 'exceeded');
    expect(reports.slice(0, firstCap).filter((c) => c.crossing === 'warned').length).toBeGreaterThanOrEqual(2); // failed, then before the cap
    await eventually(async () => eventsOf(root, 'tree_budget.exceeded').length === 1, 10_000);
    expect(eventsOf(root, 'tree_budget.warned')).toHaveLength(1);
  });

  it('the running total is exact when the budget is set while cost events of its tree commit', async () => {
    const { root, a, b } = tree();
    await cost(b, 1);
    // Events and PUTs interleaved: each event either precedes a PUT's count or sees its budget.
    const events = Array.from({ length: 40 }, (_, i) => cost(i % 2 ? a : b, 1));
    const puts = Array.from({ length: 4 }, () => put(root, 1e9));
    await Promise.all([...events, ...puts]);
    const summary = await request(nc, Holds.costSummary, { actor: operator, task_id: root });
    expect(summary.cost_cents).toBe(41);
    expect((await get(root)).spent_cents).toBe(41);
    // A duplicate usage event adds nothing.
    const again = { actor: operator, task_id: b, usage_event_id: randomUUID(), cost_cents: 5, tokens_in: 1, tokens_cached_in: 0, tokens_out: 1 };
    await request(nc, Holds.costRecord, again, T);
    await request(nc, Holds.costRecord, again, T);
    expect((await get(root)).spent_cents).toBe(46);
  });
});
