import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Budget, Holds, KandevError, OrchBudget, OrchTree, type TreeBudget } from '@kandev/contracts';
import { createLogger, on, request, serveEndpoints } from '@kandev/runtime';
import { operator, startHarness, type Harness } from './harness.js';

/**
 * B-8, the orchestrator's part, with the lifecycle and the holds service faked at the subject level:
 * a crossing report pauses the tree through the tree pause, once per key however many reports race;
 * a warning is audited once; a tree already held is not paused again; resume is refused while the
 * tree's budget (asked of the holds service) is exceeded.
 */
let h: Harness;
/** root id → the budget the fake holds service answers for it. */
const budgets = new Map<string, TreeBudget>();
beforeAll(async () => {
  h = await startHarness();
  await serveEndpoints(h.nc, { service: 'holds', instanceId: 'holds-fake', queue: 'holds', log: createLogger('fake-holds', 'silent') }, [
    on(Holds.wakeupCount, async () => ({ count: 0 })),
    on(Holds.holdApplied, async () => ({ cancelled_wakeups: 0 })),
    on(Holds.holdReleased, async () => ({ released: true })),
    on(Budget.ofRoot, async (req) => ({ budget: budgets.get(req.task_id) ?? null })),
  ]);
});
afterAll(async () => h?.stop());

const budgetOf = (task_id: string, state: TreeBudget['state']): TreeBudget => ({
  task_id,
  limit_cents: 100,
  warn_percent: 80,
  spent_cents: state === 'exceeded' ? 100 : 10,
  state,
  hold_id: null,
});
const report = (task_id: string, crossing: 'warned' | 'exceeded', key: string) =>
  request(h.nc, OrchBudget.crossed, { task_id, crossing, key, budget: budgetOf(task_id, crossing) }, { timeoutMs: 30_000 });
const auditOf = async (taskId: string, action: string) => h.sql`SELECT * FROM orchestrator.audit_log WHERE task_id = ${taskId} AND action = ${action}`;

async function family() {
  const ws = await h.workspace();
  const root = await h.task(ws.id, 'root');
  const kid = await h.task(ws.id, 'kid', root.id);
  return { ws, root, kid };
}

describe('budget crossings', () => {
  it('exceeded: five concurrent reports of one crossing make one budget hold (the tree pause), all answered with it', async () => {
    const { root, kid } = await family();
    const s = await h.startSession(kid.id, 'work');
    const key = `budget:${root.id}:1`;
    const answers = await Promise.all(Array.from({ length: 5 }, () => report(root.id, 'exceeded', key)));
    const holdId = answers[0]!.hold_id;
    expect(holdId).toBeTruthy();
    expect(answers.every((a) => a.hold_id === holdId)).toBe(true);
    const holds = await h.sql`SELECT id, created_by, reason, request_id FROM orchestrator.tree_holds WHERE root_task_id = ${root.id}`;
    expect(holds).toEqual([{ id: holdId, created_by: 'budget', reason: 'budget_exceeded', request_id: key }]);
    expect((await h.getTask(kid.id)).sessions[0]).toMatchObject({ id: s.id, state: 'CANCELLED' });
    const audit = await auditOf(root.id, 'tree.budget_exceeded');
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ actor: 'system:budget', outcome: 'paused', request_id: key });
    expect(await auditOf(kid.id, 'tree.pause')).toEqual([expect.objectContaining({ actor: 'system:budget', reason: 'budget_exceeded' })]);
  });

  it('warned: one audit row on the root per crossing, however often reported; no hold', async () => {
    const { root } = await family();
    const key = `budget:${root.id}:1`;
    expect(await Promise.all([report(root.id, 'warned', key), report(root.id, 'warned', key)])).toEqual([{ hold_id: null }, { hold_id: null }]);
    expect(await auditOf(root.id, 'tree.budget_warned')).toEqual([expect.objectContaining({ actor: 'system:budget', outcome: 'warned' })]);
    expect(await h.sql`SELECT 1 FROM orchestrator.tree_holds WHERE root_task_id = ${root.id}`).toHaveLength(0);
  });

  it('a tree with a member already held is not paused again: hold_id null, audited already_held', async () => {
    const { root, kid } = await family();
    const { hold } = await request(h.nc, OrchTree.pause, { actor: operator, task_id: kid.id });
    expect(await report(root.id, 'exceeded', `budget:${root.id}:1`)).toEqual({ hold_id: null });
    expect((await auditOf(root.id, 'tree.budget_exceeded'))[0]).toMatchObject({ outcome: 'already_held' });
    expect(
      (await h.sql`SELECT id FROM orchestrator.tree_holds WHERE released_at IS NULL AND root_task_id IN (${root.id}, ${kid.id})`).map((r) => r.id),
    ).toEqual([hold.id]);
  });

  it('resume is refused while the tree budget is exceeded, for the budget hold and for a pause inside the tree; allowed once it is not', async () => {
    const { root, kid } = await family();
    budgets.set(root.id, budgetOf(root.id, 'exceeded'));
    const sub = await request(h.nc, OrchTree.pause, { actor: operator, task_id: kid.id });
    const refusedSub = await request(h.nc, OrchTree.resume, { actor: operator, task_id: kid.id }).catch((e: KandevError) => e);
    expect(refusedSub).toMatchObject({ code: 'CONFLICT', details: { budget: { state: 'exceeded' } } });
    budgets.set(root.id, budgetOf(root.id, 'ok'));
    expect((await request(h.nc, OrchTree.resume, { actor: operator, task_id: kid.id })).hold.id).toBe(sub.hold.id);

    const { hold_id } = await report(root.id, 'exceeded', `budget:${root.id}:7`);
    budgets.set(root.id, budgetOf(root.id, 'exceeded'));
    expect(await request(h.nc, OrchTree.resume, { actor: operator, task_id: root.id }).catch((e: KandevError) => e.code)).toBe('CONFLICT');
    budgets.delete(root.id); // removed: no budget, no refusal
    expect((await request(h.nc, OrchTree.resume, { actor: operator, task_id: root.id })).hold.id).toBe(hold_id);
  });
});
