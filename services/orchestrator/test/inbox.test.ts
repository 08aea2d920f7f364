import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INBOX_MAX_ITEMS, KandevError, OrchRead, type OperatorActor } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { operator, startHarness, type Harness } from './harness.js';

/** R-12.2 and ADR 0058 at the orchestrator: the inbox read, and the single use of /ws tickets. */
let h: Harness;
beforeAll(async () => {
  h = await startHarness();
}, 60_000);
afterAll(async () => h?.stop());

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: unknown) => (e instanceof KandevError ? e.code : String(e)),
  );

async function session(taskId: string): Promise<string> {
  const id = randomUUID();
  await h.sql`INSERT INTO orchestrator.sessions (id, task_id, state, agent) VALUES (${id}, ${taskId}, 'RUNNING', 'sleep')`;
  return id;
}
async function bundle(task: { id: string; workspace_id: string }, at: string, questions: string[], opts: { status?: string; expires?: string } = {}) {
  const id = randomUUID();
  const s = await session(task.id);
  await h.sql`
    INSERT INTO orchestrator.clarification_bundles (id, task_id, workspace_id, session_id, status, created_at, expires_at, waiter_lease_until)
    VALUES (${id}, ${task.id}, ${task.workspace_id}, ${s}, ${opts.status ?? 'pending'}, ${at}, ${opts.expires ?? '2999-01-01T00:00:00Z'}, now() + interval '1 hour')`;
  let position = 0;
  for (const text of questions)
    await h.sql`INSERT INTO orchestrator.clarification_questions (bundle_id, position, id, text) VALUES (${id}, ${position++}, ${`q${position}`}, ${text})`;
  return { id, session_id: s };
}
async function permission(task: { id: string; workspace_id: string }, at: string, title: string, status = 'pending') {
  const id = randomUUID();
  const s = await session(task.id);
  await h.sql`
    INSERT INTO orchestrator.permission_requests (id, task_id, workspace_id, session_id, execution_id, permission_id, title, status, created_at, closed_at)
    VALUES (${id}, ${task.id}, ${task.workspace_id}, ${s}, ${randomUUID()}, ${randomUUID()}, ${title}, ${status}, ${at}, ${status === 'pending' ? null : at})`;
  return { id, session_id: s };
}

describe('inbox (R-12.2)', () => {
  it("every pending bundle and permission request of the workspace, any depth, oldest first, with the task's title and ancestors", async () => {
    const w = await h.workspace('inbox');
    const other = await h.workspace('inbox-other');
    const root = await h.task(w.id, 'root');
    const child = await h.task(w.id, 'child', root.id);
    const grandchild = await h.task(w.id, 'grandchild', child.id);
    const elsewhere = await h.task(other.id, 'elsewhere');
    const p1 = await permission(root, '2026-01-01T00:00:03Z', 'run ls?');
    const b1 = await bundle(grandchild, '2026-01-01T00:00:01Z', ['Which database?', 'Which port?']);
    const b2 = await bundle(child, '2026-01-01T00:00:02Z', ['Name?']);
    // Not pending, expired, or another workspace's: not in this inbox.
    await bundle(child, '2026-01-01T00:00:00Z', ['answered'], { status: 'answered' });
    await bundle(child, '2026-01-01T00:00:00Z', ['stale'], { expires: '2020-01-01T00:00:00Z' });
    await permission(root, '2026-01-01T00:00:00Z', 'answered', 'answered');
    await permission(elsewhere, '2026-01-01T00:00:00Z', 'elsewhere');

    const inbox = await request(h.nc, OrchRead.inbox, { actor: operator, workspace_id: w.id });
    expect(inbox.truncated).toBe(false);
    expect(inbox.items).toEqual([
      {
        kind: 'clarification',
        id: b1.id,
        task_id: grandchild.id,
        task_title: 'grandchild',
        session_id: b1.session_id,
        created_at: '2026-01-01T00:00:01.000Z',
        text: 'Which database?\nWhich port?',
        ancestor_ids: [root.id, child.id],
        expires_at: '2999-01-01T00:00:00.000Z',
      },
      expect.objectContaining({ kind: 'clarification', id: b2.id, task_id: child.id, text: 'Name?', ancestor_ids: [root.id] }),
      expect.objectContaining({ kind: 'permission', id: p1.id, task_id: root.id, task_title: 'root', text: 'run ls?', ancestor_ids: [], expires_at: null }),
    ]);

    const scoped: OperatorActor = { type: 'operator', id: 'op-scoped', workspaces: [other.id] };
    expect(await refusal(request(h.nc, OrchRead.inbox, { actor: scoped, workspace_id: w.id }))).toBe('FORBIDDEN');
    expect((await request(h.nc, OrchRead.inbox, { actor: scoped, workspace_id: other.id })).items.map((i) => i.text)).toEqual(['elsewhere']);
    expect(await refusal(request(h.nc, OrchRead.inbox, { actor: operator, workspace_id: randomUUID() }))).toBe('NOT_FOUND');
  });

  it(`answers at most ${INBOX_MAX_ITEMS} items and says when more wait`, async () => {
    const w = await h.workspace('inbox-full');
    const t = await h.task(w.id, 'busy');
    const s = await session(t.id);
    await h.sql`
      INSERT INTO orchestrator.permission_requests (id, task_id, workspace_id, session_id, execution_id, permission_id, title, created_at)
      SELECT gen_random_uuid(), ${t.id}, ${w.id}, ${s}, gen_random_uuid(), g::text, 'p' || g, '2026-01-01'::timestamptz + g * interval '1 second'
      FROM generate_series(1, ${INBOX_MAX_ITEMS + 1}) g`;
    const inbox = await request(h.nc, OrchRead.inbox, { actor: operator, workspace_id: w.id });
    expect(inbox.items).toHaveLength(INBOX_MAX_ITEMS);
    expect(inbox.truncated).toBe(true);
    expect(inbox.items[0]!.text).toBe('p1');
  });
});

describe('/ws ticket single use (ADR 0058)', () => {
  const consume = (jti: string, expires_at = new Date(Date.now() + 30_000).toISOString()) =>
    request(h.nc, OrchRead.ticketConsume, { actor: operator, jti, expires_at });

  it('the first use is first; every later one is not, also when they race', async () => {
    const jti = randomUUID();
    expect(await consume(jti)).toEqual({ first: true });
    expect(await consume(jti)).toEqual({ first: false });
    const racing = randomUUID();
    const results = await Promise.all(Array.from({ length: 20 }, () => consume(racing)));
    expect(results.filter((r) => r.first)).toHaveLength(1);
  });

  it('forgets tickets a minute past their expiry (the table stays small), never one that could still verify', async () => {
    const old = randomUUID();
    const recent = randomUUID();
    await h.sql`INSERT INTO orchestrator.ws_ticket_uses (jti, operator, expires_at) VALUES
      (${old}, 'op-1', now() - interval '2 minutes'), (${recent}, 'op-1', now() - interval '10 seconds')`;
    await consume(randomUUID());
    const left = await h.sql<{ jti: string }[]>`SELECT jti FROM orchestrator.ws_ticket_uses WHERE jti IN (${old}, ${recent})`;
    expect(left.map((r) => r.jti)).toEqual([recent]);
    expect(await refusal(consume(randomUUID(), 'not a time'))).toBe('VALIDATION_ERROR');
  });
});
