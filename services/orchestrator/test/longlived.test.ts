import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Budget, KandevError, Orch, OrchTree } from '@kandev/contracts';
import { createLogger, EventPublisher, on, request, serveEndpoints, startService, type RunningService } from '@kandev/runtime';
import type { OrchRuntime } from '../src/flows/context.js';
import { reconcileOnce } from '../src/flows/reconcile.js';
import { orchestratorService } from '../src/service.js';
import { operator, SECRET, startHarness, type Harness } from './harness.js';

/**
 * Behaviour over hours, not seconds: holds survive the reconciler's repairs (R-4.2, R-4.6, ADR
 * 0025), the queue is the task's and outlives its session, a tree hold reaches
 * orphans (R-2.1 for a tree), a keyed start launches once (B-7), and a refused start writes nothing
 * (ADR 0026).
 */
const STALLED_MS = 200;
let h: Harness;
beforeAll(async () => {
  h = await startHarness({ STALLED_TASK_AFTER_MS: String(STALLED_MS) });
  // A resume asks the holds service for the tree's budget (B-8): none here.
  await serveEndpoints(h.nc, { service: 'holds', instanceId: 'holds-fake', queue: 'holds', log: createLogger('fake-holds', 'silent') }, [
    on(Budget.ofRoot, async () => ({ budget: null })),
  ]);
});
let restarted: RunningService | undefined;
afterAll(async () => {
  await restarted?.stop();
  await h?.stop();
});
const rt = () => h.svc.runtime as OrchRuntime;

const until = async (fn: () => Promise<boolean>, ms = 5_000) => {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
};
const statuses = async (ids: readonly string[]) => Promise.all(ids.map(async (id) => (await h.getTask(id)).status));
/** Every row of these tasks and their sessions older than the stalled bound (as if the hold had lasted an hour). */
async function age(taskIds: readonly string[]) {
  await h.sql`UPDATE orchestrator.tasks SET updated_at = updated_at - interval '1 hour' WHERE id = ANY(${[...taskIds]}::uuid[])`;
  await h.sql`UPDATE orchestrator.sessions SET updated_at = updated_at - interval '1 hour' WHERE task_id = ANY(${[...taskIds]}::uuid[])`;
  await h.sql`UPDATE orchestrator.tree_holds SET created_at = created_at - interval '1 hour', released_at = released_at - interval '1 hour' WHERE root_task_id = ANY(${[...taskIds]}::uuid[])`;
}
const execOf = (sessionId: string) => [...h.life.registry.values()].find((e) => e.session_id === sessionId)!;
const audit = (taskId: string) => request(h.nc, Orch.taskAudit, { actor: operator, task_id: taskId });

async function workingTree() {
  const ws = await h.workspace();
  const root = await h.task(ws.id, 'root');
  const child = await h.task(ws.id, 'child', root.id);
  const todo = await h.task(ws.id, 'todo', root.id);
  await h.startSession(root.id, 'work');
  await h.startSession(child.id, 'work');
  return { ws, root, child, todo, ids: [root.id, child.id, todo.id] };
}

describe('holds are part of every repair', () => {
  it('control: an IN_PROGRESS task with nothing running and no hold goes to REVIEW after the bound', async () => {
    const ws = await h.workspace();
    const t = await h.task(ws.id, 'alone');
    const s = await h.startSession(t.id, 'work');
    await h.sql`UPDATE orchestrator.sessions SET state = 'FAILED' WHERE id = ${s.id}`;
    await age([t.id]);
    await reconcileOnce(rt());
    expect((await h.getTask(t.id)).status).toBe('REVIEW');
  });

  it('a pause held past the stalled bound changes no member status, during the pause and after resume', async () => {
    const { root, ids } = await workingTree();
    const before = await statuses(ids);
    expect(before).toEqual(['IN_PROGRESS', 'IN_PROGRESS', 'TODO']);
    await request(h.nc, OrchTree.pause, { actor: operator, task_id: root.id });
    await age(ids);
    await reconcileOnce(rt());
    expect(await statuses(ids)).toEqual(before);

    await request(h.nc, OrchTree.resume, { actor: operator, task_id: root.id });
    await age(ids);
    await reconcileOnce(rt());
    expect(await statuses(ids)).toEqual(before);
    // ADR 0025: what the resume left IN_PROGRESS with nothing running is flagged for the operator.
    const flagged = (await audit(root.id)).filter((a) => a.action === 'task.needs_attention');
    expect(flagged).toEqual([expect.objectContaining({ reason: 'resumed_without_session', outcome: 'flagged' })]);
    expect((await audit(ids[2]!)).some((a) => a.action === 'task.needs_attention')).toBe(false);

    // Once a session of it moves again, the ordinary repair applies to it.
    const s = await h.startSession(root.id, 'again');
    await h.sql`UPDATE orchestrator.sessions SET state = 'FAILED' WHERE id = ${s.id}`;
    await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '1 minute' WHERE id = ${s.id}`;
    await h.sql`UPDATE orchestrator.tasks SET updated_at = now() - interval '1 minute' WHERE id = ${root.id}`;
    await reconcileOnce(rt());
    expect((await h.getTask(root.id)).status).toBe('REVIEW');
  });

  it('a restored tree keeps its snapshot statuses past the stalled bound, flagged (ADR 0025)', async () => {
    const { root, ids } = await workingTree();
    const before = await statuses(ids);
    await request(h.nc, OrchTree.cancel, { actor: operator, task_id: root.id });
    await age(ids);
    await reconcileOnce(rt());
    expect(await statuses(ids)).toEqual(['CANCELLED', 'CANCELLED', 'CANCELLED']);
    await request(h.nc, OrchTree.restore, { actor: operator, task_id: root.id });
    expect(await statuses(ids)).toEqual(before);
    await age(ids);
    await reconcileOnce(rt());
    expect(await statuses(ids)).toEqual(before);
    const flagged = (await audit(ids[1]!)).filter((a) => a.action === 'task.needs_attention');
    expect(flagged).toEqual([expect.objectContaining({ reason: 'restored_without_session' })]);
  });

  it('a session lost under a pause does not move its task to REVIEW', async () => {
    const ws = await h.workspace();
    const root = await h.task(ws.id, 'root');
    const s = await h.startSession(root.id, 'work');
    // A pause whose stop of this session was never written (its session still says RUNNING): the
    // execution is then lost. The session is reconciled; the task is the hold's.
    await request(h.nc, OrchTree.pause, { actor: operator, task_id: root.id });
    await h.sql`UPDATE orchestrator.sessions SET state = 'RUNNING', updated_at = now() - interval '1 minute' WHERE id = ${s.id}`;
    await h.life.forget(execOf(s.id).execution_id);
    expect((await reconcileOnce(rt())).lost).toBe(1);
    expect((await h.getTask(root.id)).status).toBe('IN_PROGRESS');
  });
});

describe('tree pause and cancel reach orphans', () => {
  it.each(['pause', 'cancel'] as const)('%s halts a live process under a FAILED session of a member', async (mode) => {
    const ws = await h.workspace();
    const root = await h.task(ws.id, 'root');
    const child = await h.task(ws.id, 'child', root.id);
    const s = await h.startSession(child.id, 'work');
    const e = execOf(s.id);
    // The session failed while its process lives on (an orphan, as R-2 finds through the registry).
    await h.sql`UPDATE orchestrator.sessions SET state = 'FAILED', error_message = 'agent exited unexpectedly' WHERE id = ${s.id}`;
    await request(h.nc, mode === 'pause' ? OrchTree.pause : OrchTree.cancel, { actor: operator, task_id: root.id });
    await h.teardownsOf([e.execution_id]);
    expect(h.life.stops.find((x) => x.execution_id === e.execution_id)).toMatchObject({
      orphaned: true,
      reason: mode === 'pause' ? 'tree_paused' : 'tree_cancelled',
    });
    // the orphan's session keeps its terminal state and message.
    expect((await h.getTask(child.id)).sessions[0]).toMatchObject({ state: 'FAILED', error_message: 'agent exited unexpectedly' });
  });

  it('the reconciler stops a live process of a held member the hold did not reach', async () => {
    const ws = await h.workspace();
    const root = await h.task(ws.id, 'root');
    await request(h.nc, OrchTree.pause, { actor: operator, task_id: root.id });
    // A process registered for the member after the hold's stop (its stop lost, a listing missed it).
    const s = await h.startSession((await h.task(ws.id, 'other')).id, 'work');
    const e = execOf(s.id);
    e.task_id = root.id;
    e.updated_at = new Date(Date.now() - 60_000).toISOString();
    await h.life.save(e);
    const before = h.life.stops.filter((x) => x.execution_id === e.execution_id).length;
    expect((await reconcileOnce(rt())).restopped).toBeGreaterThanOrEqual(1);
    expect(h.life.stops.filter((x) => x.execution_id === e.execution_id).length).toBe(before + 1);
    expect(h.life.stops.at(-1)).toMatchObject({ execution_id: e.execution_id, reason: 'tree_paused', orphaned: true });
    expect((await audit(root.id)).some((a) => a.action === 'reconcile.restop_held')).toBe(true);
  });
});

describe("the queue is the task's", () => {
  async function endTurn(ws: string, taskId: string, sessionId: string) {
    const e = execOf(sessionId);
    const turn = e.turn_id!;
    e.status = 'READY';
    e.turn_id = null;
    await h.life.save(e);
    await new EventPublisher(h.nc).emit(
      'turn.completed',
      { workspace_id: ws, task_id: taskId, session_id: sessionId },
      { execution_id: e.execution_id, turn_id: turn, stop_reason: 'end_turn' },
    );
  }
  const queue = (taskId: string) => request(h.nc, Orch.taskQueue, { actor: operator, task_id: taskId });

  it('messages queued before a parent stop are delivered by the next session, in order, once', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    await h.startSession(child.id, 'busy');
    expect((await h.message(parent.id, child.id, 'first')).status).toBe('queued');
    expect((await h.message(parent.id, child.id, 'second')).status).toBe('queued');
    expect((await h.stopChild(parent.id, child.id)).status).toBe('stopped');
    expect((await queue(child.id)).map((m) => m.prompt)).toEqual(['first', 'second']); // kept
    const prompted = h.life.prompts.length;

    // The next session, started without a prompt, delivers the oldest first.
    const next = await h.startSession(child.id);
    await until(async () => (await queue(child.id)).length === 1);
    expect(h.life.prompts.slice(prompted).map((p) => p.prompt)).toEqual(['first']);
    await endTurn(ws.id, child.id, next.id);
    await until(async () => (await queue(child.id)).length === 0);
    await endTurn(ws.id, child.id, next.id);
    await until(async () => (await h.getTask(child.id)).sessions.at(-1)!.state === 'WAITING_FOR_INPUT');
    expect(h.life.prompts.slice(prompted).map((p) => p.prompt)).toEqual(['first', 'second']);
  });

  it('a next session started with a prompt delivers the queue after that first turn', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    await h.startSession(child.id, 'busy');
    await h.message(parent.id, child.id, 'queued one');
    await h.stopChild(parent.id, child.id);
    const prompted = h.life.prompts.length;
    const next = await h.startSession(child.id, 'own prompt');
    expect((await queue(child.id)).length).toBe(1);
    await endTurn(ws.id, child.id, next.id);
    await until(async () => (await queue(child.id)).length === 0);
    expect(h.life.prompts.slice(prompted).map((p) => p.prompt)).toEqual(['own prompt', 'queued one']);
  });

  it('two orchestrator replicas on one NATS and database, and a restart between: each message delivered once', async () => {
    const second: RunningService = await startService(orchestratorService, {
      ...process.env,
      NATS_URL: h.nats.url,
      DATABASE_URL: h.db.url,
      KANDEV_JWT_SECRET: SECRET,
      LOG_LEVEL: 'silent',
      INSTANCE_ID: 'orch-test-2',
      RECONCILE_INTERVAL_MS: '3600000',
    });
    try {
      const ws = await h.workspace();
      const parent = await h.task(ws.id, 'parent');
      const children = await Promise.all([1, 2, 3, 4].map((i) => h.task(ws.id, `child ${i}`, parent.id)));
      for (const c of children) {
        await h.startSession(c.id, 'busy');
        for (const m of ['a', 'b']) await h.message(parent.id, c.id, `${c.id}:${m}`);
        await h.stopChild(parent.id, c.id);
      }
      // Both replicas serve starts (queue group); the turn ends fan out to both as events.
      const sessions = await Promise.all(children.map((c) => h.startSession(c.id)));
      await Promise.all(children.map((c) => until(async () => (await queue(c.id)).length === 1)));
      await Promise.all(children.map((c, i) => endTurn(ws.id, c.id, sessions[i]!.id)));
      await Promise.all(children.map((c) => until(async () => (await queue(c.id)).length === 0)));
      // A restart of one replica, then the turn ends again: nothing is delivered twice.
      await second.stop();
      await Promise.all(children.map((c, i) => endTurn(ws.id, c.id, sessions[i]!.id)));
      await Promise.all(children.map((c) => until(async () => (await h.getTask(c.id)).sessions.at(-1)!.state === 'WAITING_FOR_INPUT')));
      for (const c of children) {
        expect(h.life.prompts.filter((p) => p.prompt.startsWith(c.id)).map((p) => p.prompt)).toEqual([`${c.id}:a`, `${c.id}:b`]);
      }
    } finally {
      await second.stop().catch(() => undefined);
    }
  });

  it('DELETE /tasks/:id/queue/:message_id removes an undelivered message (audited); gone → NOT_FOUND', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    await h.startSession(child.id, 'busy');
    await h.message(parent.id, child.id, 'keep');
    await h.message(parent.id, child.id, 'drop');
    const [, drop] = await queue(child.id);
    const removed = await request(h.nc, Orch.taskQueueDelete, { actor: operator, task_id: child.id, message_id: drop!.id });
    expect(removed).toMatchObject({ id: drop!.id, prompt: 'drop' });
    expect((await queue(child.id)).map((m) => m.prompt)).toEqual(['keep']);
    expect((await audit(child.id)).find((a) => a.action === 'queue.delete')).toMatchObject({
      outcome: 'deleted',
      details: expect.objectContaining({ message_id: drop!.id }),
    });
    const again = await request(h.nc, Orch.taskQueueDelete, { actor: operator, task_id: child.id, message_id: drop!.id }).catch((e: KandevError) => e);
    expect(again).toMatchObject({ code: 'NOT_FOUND' });
    // Another task's message is not reachable through this task.
    const other = await request(h.nc, Orch.taskQueueDelete, { actor: operator, task_id: parent.id, message_id: (await queue(child.id))[0]!.id }).catch(
      (e: KandevError) => e,
    );
    expect(other).toMatchObject({ code: 'NOT_FOUND' });
  });

  it('after a user cancel the queue waits (also for the next session) until POST /tasks/:id/queue/resume', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const s = await h.startSession(child.id, 'busy');
    await h.message(parent.id, child.id, 'later');
    await request(h.nc, Orch.agentCancel, { actor: operator, session_id: s.id });
    expect((await queue(child.id)).length).toBe(1); // not auto-run
    // Stopped and started again: the pause is the task's queue's, not the old session's.
    await h.stopChild(parent.id, child.id);
    const next = await h.startSession(child.id);
    expect((await h.getTask(child.id)).sessions.at(-1)!.state).toBe('WAITING_FOR_INPUT');
    expect((await queue(child.id)).length).toBe(1);
    const prompted = h.life.prompts.length;
    const res = await request(h.nc, Orch.taskQueueResume, { actor: operator, task_id: child.id });
    expect(res).toMatchObject({ task_id: child.id, resumed: true, size: 0 });
    expect(res.delivered_message_id).not.toBeNull();
    expect(h.life.prompts.slice(prompted).map((p) => p.prompt)).toEqual(['later']);
    expect((await h.getTask(child.id)).sessions.find((x) => x.id === next.id)!.state).toBe('RUNNING');
    expect((await audit(child.id)).find((a) => a.action === 'queue.resume')).toMatchObject({ outcome: 'delivered' });
  });
});

describe('Idempotency-Key on a start (B-7) and a prompt', () => {
  it('a retry answers the same session (replayed) and launches nothing; concurrently too; and after a restart', async () => {
    const ws = await h.workspace();
    const t = await h.task(ws.id, 'keyed');
    const launches = h.life.launches.length;
    const start = () => request(h.nc, Orch.sessionStart, { actor: operator, task_id: t.id, prompt: 'go', idempotency_key: 'k-1' });
    const [a, b] = await Promise.all([start(), start()]);
    expect(a.id).toBe(b.id);
    expect([a.replayed, b.replayed].filter(Boolean)).toHaveLength(1);
    expect(h.life.launches.length - launches).toBe(1);
    // A different body under the same key is refused, and changes nothing.
    const other = await request(h.nc, Orch.sessionStart, { actor: operator, task_id: t.id, prompt: 'else', idempotency_key: 'k-1' }).catch(
      (e: KandevError) => e,
    );
    expect(other).toMatchObject({ code: 'CONFLICT' });
    // The orchestrator restarts (a new instance on the same database): the key is durable.
    await h.svc.stop();
    h.svc = restarted = await startService(orchestratorService, {
      ...process.env,
      NATS_URL: h.nats.url,
      DATABASE_URL: h.db.url,
      KANDEV_JWT_SECRET: SECRET,
      LOG_LEVEL: 'silent',
      INSTANCE_ID: 'orch-test-restarted',
      RECONCILE_INTERVAL_MS: '3600000',
      STALLED_TASK_AFTER_MS: String(STALLED_MS),
    });
    const c = await start();
    expect(c).toMatchObject({ id: a.id, replayed: true });
    expect(h.life.launches.length - launches).toBe(1);
    expect((await h.getTask(t.id)).sessions).toHaveLength(1);
  });

  it('a retried prompt answers the first turn and starts none', async () => {
    const ws = await h.workspace();
    const t = await h.task(ws.id, 'prompted');
    const s = await h.startSession(t.id);
    const prompts = h.life.prompts.length;
    const send = () => request(h.nc, Orch.sessionPrompt, { actor: operator, session_id: s.id, prompt: 'once', idempotency_key: 'p-1' });
    const [x, y] = await Promise.all([send(), send()]);
    expect(x.turn_id).toBe(y.turn_id);
    expect(h.life.prompts.length - prompts).toBe(1);
  });
});

describe('launch admission before any write (ADR 0026)', () => {
  it('a start refused by the lifecycle queue leaves no session and no status change', async () => {
    const ws = await h.workspace();
    const t = await h.task(ws.id, 'refused');
    h.life.reserveFails = new KandevError('UNAVAILABLE', 'lifecycle is busy', { retry_after_s: 4 });
    try {
      const before = await h.snapshot();
      const err = await h.startSession(t.id, 'go').catch((e: KandevError) => e);
      expect(err).toMatchObject({ code: 'UNAVAILABLE', details: { retry_after_s: 4 } });
      expect(await h.snapshot()).toEqual(before);
    } finally {
      h.life.reserveFails = null;
    }
  });
});
