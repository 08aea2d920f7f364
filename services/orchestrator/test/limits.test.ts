import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { KandevError, Orch, OrchMcpClarification, OrchTree } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { agentToken, operator, startHarness, type Harness } from './harness.js';

async function failure(p: Promise<unknown>): Promise<KandevError | null> {
  try {
    await p;
    return null;
  } catch (e) {
    if (e instanceof KandevError) return e;
    throw e;
  }
}

/** at the orchestrator, with small configured limits: each at its boundary, and under concurrency. */
describe('limits an agent cannot exceed', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness({
      KANDEV_MAX_CHILDREN: '5',
      KANDEV_MAX_DEPTH: '3',
      KANDEV_MAX_LIVE_SESSIONS_PER_WORKSPACE: '3',
      KANDEV_MAX_PENDING_QUESTIONS_PER_SESSION: '2',
    });
  });
  afterAll(async () => h?.stop());

  it('children per task: the 5th child is accepted, the 6th refused with CONFLICT naming the limit; archiving one makes room; operators are not bound', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const made = [];
    for (let i = 1; i <= 5; i++) made.push(await h.createChild(parent.id, { title: `c${i}` }));
    const sixth = await failure(h.createChild(parent.id, { title: 'c6' }));
    expect(sixth?.code).toBe('CONFLICT');
    expect(sixth?.details).toEqual({ limit: 'children_per_task', max: 5, current: 5 });
    await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: made[0]!.id, archived: true });
    expect((await h.createChild(parent.id, { title: 'c6 after archive' })).parent_id).toBe(parent.id);
    // An operator's child is not an agent's: no cap.
    expect((await h.task(ws.id, 'operator child', parent.id)).parent_id).toBe(parent.id);
  });

  it('children per task holds under concurrency: 12 creates at once make exactly 5 children', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const results = await Promise.allSettled(Array.from({ length: 12 }, (_, i) => h.createChild(parent.id, { title: `c${i}` })));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(5);
    for (const r of results) if (r.status === 'rejected') expect((r.reason as KandevError).details).toMatchObject({ limit: 'children_per_task' });
    const [{ n }] = await h.sql<[{ n: number }]>`SELECT count(*)::int AS n FROM orchestrator.tasks WHERE parent_id = ${parent.id}`;
    expect(n).toBe(5);
  });

  it('tree depth: levels 2 and 3 are created, a 4th level is refused', async () => {
    const ws = await h.workspace();
    const root = await h.task(ws.id, 'root'); // level 1
    const l2 = await h.createChild(root.id, { title: 'l2' });
    const l3 = await h.createChild(l2.id, { title: 'l3' });
    const l4 = await failure(h.createChild(l3.id, { title: 'l4' }));
    expect(l4?.code).toBe('CONFLICT');
    expect(l4?.details).toEqual({ limit: 'tree_depth', max: 3, current: 3 });
    const [{ n }] = await h.sql<[{ n: number }]>`SELECT count(*)::int AS n FROM orchestrator.tasks WHERE parent_id = ${l3.id}`;
    expect(n).toBe(0);
  });

  it('live sessions per workspace: the 3rd start is accepted, the 4th refused with nothing written; concurrent starts never pass the cap; a stop makes room', async () => {
    const ws = await h.workspace();
    const tasks = await Promise.all(Array.from({ length: 8 }, (_, i) => h.task(ws.id, `t${i}`)));
    const launchesBefore = h.life.launches.length;
    const results = await Promise.allSettled(tasks.map((t) => h.startSession(t.id, 'work')));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
    const refused = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect((refused.reason as KandevError).code).toBe('CONFLICT');
    expect((refused.reason as KandevError).details).toEqual({ limit: 'live_sessions_per_workspace', max: 3, current: 3 });
    const [{ n }] = await h.sql<[{ n: number }]>`
      SELECT count(*)::int AS n FROM orchestrator.sessions s JOIN orchestrator.tasks t ON t.id = s.task_id WHERE t.workspace_id = ${ws.id}`;
    expect(n).toBe(3);
    expect(h.life.launches.length - launchesBefore).toBe(3);
    const idle = tasks.filter((_, i) => results[i]!.status === 'rejected');
    expect((await h.getTask(idle[0]!.id)).status).toBe('TODO');
    // Another workspace is not affected.
    const other = await h.task((await h.workspace()).id, 'other');
    expect((await h.startSession(other.id, 'work')).state).toBe('RUNNING');
    // Stopping one frees a place.
    const running = tasks.filter((_, i) => results[i]!.status === 'fulfilled');
    await request(h.nc, Orch.taskStop, { actor: operator, task_id: running[0]!.id });
    expect((await h.startSession(idle[0]!.id, 'work')).state).toBe('RUNNING');
    for (const t of [...running.slice(1), idle[0]!, other]) await request(h.nc, Orch.taskStop, { actor: operator, task_id: t.id });
  });

  it('a wakeup refused by the live-session cap launches nothing and names the cap as its skip reason', async () => {
    const ws = await h.workspace();
    const tasks = await Promise.all(Array.from({ length: 4 }, (_, i) => h.task(ws.id, `w${i}`)));
    for (const t of tasks.slice(0, 3)) await h.startSession(t.id, 'work');
    const launchesBefore = h.life.launches.length;
    const refused = await request(h.nc, OrchTree.wakeupLaunch, { wakeup_id: randomUUID(), task_id: tasks[3]!.id, prompt: 'wake up' });
    expect(refused).toMatchObject({ launched: false, hold_mode: null, skip_reason: 'live_session_limit' });
    expect(h.life.launches.length).toBe(launchesBefore);
    expect((await h.getTask(tasks[3]!.id)).sessions).toHaveLength(0);
    for (const t of tasks.slice(0, 3)) await request(h.nc, Orch.taskStop, { actor: operator, task_id: t.id });
  });

  it('pending question bundles per session: the 2nd is accepted, the 3rd refused', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'asks');
    const session = await h.startSession(task.id, 'work');
    const ask = async (id: string) =>
      request(h.nc, OrchMcpClarification.ask, {
        caller_task_id: task.id,
        agent_token: await agentToken(task.id),
        caller_session_id: session.id,
        questions: [{ id, text: `${id}?` }],
      });
    await ask('a');
    await ask('b');
    const third = await failure(ask('c'));
    expect(third?.code).toBe('CONFLICT');
    expect(third?.details).toEqual({ limit: 'pending_questions_per_session', max: 2, current: 2 });
    const [{ n }] = await h.sql<[{ n: number }]>`SELECT count(*)::int AS n FROM orchestrator.clarification_bundles WHERE session_id = ${session.id}`;
    expect(n).toBe(2);
    await request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id });
  });
});

describe('default limits', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => h?.stop());

  it('KANDEV_MAX_CHILDREN defaults to 100: the 100th child is accepted, the 101st refused', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    for (let i = 1; i <= 100; i += 10) await Promise.all(Array.from({ length: 10 }, (_, j) => h.createChild(parent.id, { title: `c${i + j}` })));
    const refused = await failure(h.createChild(parent.id, { title: 'c101' }));
    expect(refused?.details).toEqual({ limit: 'children_per_task', max: 100, current: 100 });
  });
});
