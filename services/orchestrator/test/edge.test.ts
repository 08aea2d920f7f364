import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KandevError, Orch, OrchMcp } from '@kandev/contracts';
import { request, signAgentToken, signOperatorToken } from '@kandev/runtime';
import { SignJWT } from 'jose';
import type { OrchRuntime } from '../src/flows/context.js';
import { reconcileOnce } from '../src/flows/reconcile.js';
import { agentToken, operator, SECRET, startHarness, type Harness } from './harness.js';

/** Issue 10: validation before effects, idempotency keys, and verified callers on the MCP surface. */
let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => h?.stop());
const rt = () => h.svc.runtime as OrchRuntime;

async function family() {
  const ws = await h.workspace();
  const parent = await h.task(ws.id, 'parent');
  const child = await h.task(ws.id, 'child', parent.id);
  const sibling = await h.task(ws.id, 'sibling', parent.id);
  return { ws, parent, child, sibling };
}

describe('validation before effects', () => {
  it('refuses a session start with an unknown agent before writing anything', async () => {
    const { child } = await family();
    const before = await h.snapshot();
    await expect(request(h.nc, Orch.sessionStart, { actor: operator, task_id: child.id, agent: 'no-such-agent', prompt: 'go' })).rejects.toMatchObject({
      code: 'VALIDATION_ERROR',
      message: expect.stringMatching(/unknown agent/),
    });
    expect(await h.snapshot()).toEqual(before);
    expect((await h.getTask(child.id)).status).toBe('TODO');
  });

  it('refuses a task naming an unknown agent at creation, and one whose agent left the catalogue at session start', async () => {
    const ws = await h.workspace();
    let before = await h.snapshot();
    await expect(request(h.nc, Orch.taskCreate, { actor: operator, workspace_id: ws.id, title: 't', agent: 'ghost-agent' })).rejects.toMatchObject({
      code: 'VALIDATION_ERROR',
    });
    expect(await h.snapshot()).toEqual(before);
    h.life.agents.add('ghost-agent');
    const task = await request(h.nc, Orch.taskCreate, { actor: operator, workspace_id: ws.id, title: 't', agent: 'ghost-agent' });
    h.life.agents.delete('ghost-agent');
    // The orchestrator trusts a known name for AGENT_CATALOGUE_TTL_MS; a start after that re-asks.
    await new Promise((r) => setTimeout(r, rt().env.AGENT_CATALOGUE_TTL_MS + 50));
    before = await h.snapshot();
    await expect(h.startSession(task.id, 'go')).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(await h.snapshot()).toEqual(before);
  });

  it('returns the task to the status it had when the launch fails', async () => {
    const { child } = await family();
    await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: child.id, status: 'BLOCKED' });
    h.life.launchFails = new KandevError('UNAVAILABLE', 'lifecycle overloaded');
    try {
      await expect(h.startSession(child.id, 'go')).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    } finally {
      h.life.launchFails = null;
    }
    const t = await h.getTask(child.id);
    expect(t.status).toBe('BLOCKED');
    expect(t.sessions).toHaveLength(1);
    expect(t.sessions[0]).toMatchObject({ state: 'FAILED', error_message: 'lifecycle overloaded' });
    // And it can be started again normally.
    await h.startSession(child.id, 'again');
    expect((await h.getTask(child.id)).status).toBe('IN_PROGRESS');
  });

  it('reconciler: a task IN_PROGRESS with no active session goes to REVIEW after the bound, not before', async () => {
    const { child } = await family();
    const s = await h.startSession(child.id, 'work');
    // As after a lost launch whose repair was never written: the session ended, the task still says IN_PROGRESS.
    await h.sql`UPDATE orchestrator.sessions SET state = 'FAILED' WHERE id = ${s.id}`;
    await reconcileOnce(rt());
    expect((await h.getTask(child.id)).status).toBe('IN_PROGRESS'); // too fresh
    const bound = rt().env.STALLED_TASK_AFTER_MS;
    await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - make_interval(secs => ${(bound + 1000) / 1000}) WHERE id = ${s.id}`;
    await h.sql`UPDATE orchestrator.tasks SET updated_at = now() - make_interval(secs => ${(bound + 1000) / 1000}) WHERE id = ${child.id}`;
    const res = await reconcileOnce(rt());
    expect(res.repaired).toBeGreaterThanOrEqual(1);
    expect((await h.getTask(child.id)).status).toBe('REVIEW');
    const [ev] = await h.sql`SELECT count(*)::int AS n FROM orchestrator.tasks WHERE id = ${child.id} AND status = 'REVIEW'`;
    expect(ev!.n).toBe(1);
  });

  it('reconciler leaves a task with an active session alone however old', async () => {
    const { child } = await family();
    await h.startSession(child.id, 'work');
    await h.sql`UPDATE orchestrator.tasks SET updated_at = now() - interval '1 day' WHERE id = ${child.id}`;
    await h.sql`UPDATE orchestrator.sessions SET updated_at = now() - interval '1 day' WHERE task_id = ${child.id}`;
    await reconcileOnce(rt());
    expect((await h.getTask(child.id)).status).toBe('IN_PROGRESS');
  });

  it('create_task_kandev with a bad agent creates no child', async () => {
    const { parent } = await family();
    const before = await h.snapshot();
    await expect(h.createChild(parent.id, { title: 'c', agent: 'bogus', prompt: 'go' })).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
    await expect(h.createChild(parent.id, { title: 'c', agent: 'bogus' })).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(await h.snapshot()).toEqual(before);
  });

  it('POST /tasks with a parent in another workspace answers exactly like a missing parent', async () => {
    const { parent } = await family();
    const other = await h.workspace('other');
    const foreign = await request(h.nc, Orch.taskCreate, { actor: operator, workspace_id: other.id, title: 'x', parent_id: parent.id }).catch((e) => e);
    const missing = await request(h.nc, Orch.taskCreate, {
      actor: operator,
      workspace_id: other.id,
      title: 'x',
      parent_id: '00000000-0000-4000-8000-00000000dead',
    }).catch((e) => e);
    expect(foreign).toMatchObject({ code: 'NOT_FOUND' });
    expect(foreign.toBody()).toEqual(missing.toBody());
  });
});

describe('idempotency_key', () => {
  it('POST /tasks: the same key answers with the same task, once', async () => {
    const ws = await h.workspace();
    const req = { actor: operator, workspace_id: ws.id, title: 'once', idempotency_key: 'k-1' };
    const [a, b] = await Promise.all([request(h.nc, Orch.taskCreate, req).catch((e) => e), request(h.nc, Orch.taskCreate, req).catch((e) => e)]);
    // Concurrent: one creates, the other either sees the result or is told to retry (never a second task).
    const c = await request(h.nc, Orch.taskCreate, req);
    const ids = [a, b, c].filter((x) => !(x instanceof Error)).map((x) => x.id);
    expect(new Set(ids).size).toBe(1);
    for (const x of [a, b]) if (x instanceof Error) expect(x).toMatchObject({ code: 'CONFLICT' });
    const [row] = await h.sql`SELECT count(*)::int AS n FROM orchestrator.tasks WHERE workspace_id = ${ws.id}`;
    expect(row!.n).toBe(1);
    // The same key with different fields is a conflict; another operator's same key is independent.
    await expect(request(h.nc, Orch.taskCreate, { ...req, title: 'different' })).rejects.toMatchObject({ code: 'CONFLICT' });
    const other = await request(h.nc, Orch.taskCreate, { ...req, actor: { ...operator, id: 'op-2' } });
    expect(other.id).not.toBe(c.id);
  });

  it('create_task_kandev: a retry with the same key returns the first child', async () => {
    const { parent } = await family();
    const a = await h.createChild(parent.id, { title: 'kid', prompt: 'go', idempotency_key: 'child-1' });
    const b = await h.createChild(parent.id, { title: 'kid', prompt: 'go', idempotency_key: 'child-1' });
    expect(b).toEqual(a);
    const rows = await h.sql`SELECT id FROM orchestrator.tasks WHERE parent_id = ${parent.id} AND title = 'kid'`;
    expect(rows).toHaveLength(1);
  });

  it('message_task_kandev: a retry with the same key queues nothing more', async () => {
    const { parent, child } = await family();
    await h.startSession(child.id, 'busy'); // a turn runs: messages queue
    const a = await h.message(parent.id, child.id, 'fyi', undefined, 'msg-1');
    const b = await h.message(parent.id, child.id, 'fyi', undefined, 'msg-1');
    expect(a.status).toBe('queued');
    expect(b).toEqual(a);
    const queue = await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id });
    expect(queue.map((m) => m.prompt)).toEqual(['fyi']);
  });
});

describe('kandev.orch.mcp.> trusts only a verified agent token', () => {
  const forged = async (payload: Record<string, unknown>) => {
    const raw = await h.nc.request(OrchMcp.stopChildTask.subject, new TextEncoder().encode(JSON.stringify(payload)), { timeout: 5000 });
    return JSON.parse(new TextDecoder().decode(raw.data)) as { ok: boolean; error?: { code: string; message: string } };
  };
  const noExp = (task_id: string) =>
    new SignJWT({ task_id, mode: 'task' })
      .setProtectedHeader({ alg: 'HS256' })
      .setAudience('kandev-mcp')
      .setIssuer('kandev')
      .sign(new TextEncoder().encode(SECRET));

  it.each([
    ['no token', async () => undefined, 'UNAUTHORIZED'],
    ['a token of another task (the target itself)', async (f: Awaited<ReturnType<typeof family>>) => agentToken(f.child.id), 'UNAUTHORIZED'],
    ['a token of a sibling', async (f: Awaited<ReturnType<typeof family>>) => agentToken(f.sibling.id), 'UNAUTHORIZED'],
    [
      'an expired token',
      async (f: Awaited<ReturnType<typeof family>>) => signAgentToken(SECRET, { task_id: f.parent.id, mode: 'task' }, '-1m'),
      'UNAUTHORIZED',
    ],
    ['a token without exp', async (f: Awaited<ReturnType<typeof family>>) => noExp(f.parent.id), 'UNAUTHORIZED'],
    [
      'a token signed with another secret',
      async (f: Awaited<ReturnType<typeof family>>) => signAgentToken('another-secret-0123456789', { task_id: f.parent.id, mode: 'task' }),
      'UNAUTHORIZED',
    ],
    ['an operator token (wrong audience)', async () => signOperatorToken(SECRET, { sub: 'mallory', workspaces: ['*'] }), 'UNAUTHORIZED'],
    ['a config-mode token of the parent', async (f: Awaited<ReturnType<typeof family>>) => agentToken(f.parent.id, 'config'), 'FORBIDDEN'],
    ['garbage', async () => 'not.a.jwt', 'UNAUTHORIZED'],
  ])('refuses a forged stop_task with %s; the child keeps running', async (_name, token, code) => {
    const f = await family();
    const session = await h.startSession(f.child.id, 'work');
    const stops = h.life.stops.length;
    const before = await h.snapshot();
    const t = await (token as (f: unknown) => Promise<string | undefined>)(f);
    const reply = await forged({ caller_task_id: f.parent.id, task_id: f.child.id, ...(t ? { agent_token: t } : {}) });
    expect(reply).toMatchObject({ ok: false, error: { code } });
    expect(h.life.stops.length).toBe(stops);
    expect(await h.snapshot()).toEqual(before);
    const exec = [...h.life.registry.values()].find((e) => e.session_id === session.id)!;
    expect(exec.status).toBe('RUNNING');
  });

  it('refuses forged message and create requests the same way, writing nothing', async () => {
    const f = await family();
    const before = await h.snapshot();
    for (const [subject, body] of [
      [OrchMcp.messageTask.subject, { caller_task_id: f.parent.id, task_id: f.child.id, prompt: 'x' }],
      [OrchMcp.createTask.subject, { caller_task_id: f.parent.id, title: 'x' }],
      [OrchMcp.whoami.subject, { caller_task_id: f.parent.id }],
    ] as const) {
      const raw = await h.nc.request(subject, new TextEncoder().encode(JSON.stringify(body)), { timeout: 5000 });
      expect(JSON.parse(new TextDecoder().decode(raw.data))).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED' } });
    }
    expect(await h.snapshot()).toEqual(before);
  });
});

describe('queued messages: any task of the workspace may queue (pinned rule, docs/security.md)', () => {
  it.each([
    ['child → parent', (f: Awaited<ReturnType<typeof family>>) => [f.child.id, f.parent.id]],
    ['sibling → sibling', (f: Awaited<ReturnType<typeof family>>) => [f.sibling.id, f.child.id]],
    ['self', (f: Awaited<ReturnType<typeof family>>) => [f.child.id, f.child.id]],
  ])('%s: queued is accepted (a session starts), interrupt is FORBIDDEN', async (_name, pick) => {
    const f = await family();
    const [caller, target] = pick(f) as [string, string];
    await expect(h.message(caller, target, 'please look', 'interrupt')).rejects.toMatchObject({ code: 'FORBIDDEN' });
    const res = await h.message(caller, target, 'please look');
    expect(res.status).toBe('started');
  });
});

describe('workspace scope', () => {
  it('a workspace-scoped operator may not create workspaces; an all-workspaces one may', async () => {
    const ws = await h.workspace();
    const before = await h.snapshot();
    await expect(request(h.nc, Orch.workspaceCreate, { actor: { type: 'operator', id: 'scoped', workspaces: [ws.id] }, name: 'mine' })).rejects.toMatchObject({
      code: 'FORBIDDEN',
    });
    expect(await h.snapshot()).toEqual(before);
    await expect(request(h.nc, Orch.workspaceCreate, { actor: operator, name: 'ok' })).resolves.toMatchObject({ name: 'ok' });
  });
});
