import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstream } from '@nats-io/jetstream';
import { eventSubject, KandevError, Orch, OrchRead, OrchTree, type EventEnvelope, type OperatorActor, type SessionMessageData } from '@kandev/contracts';
import { buildEvent, EventPublisher, request } from '@kandev/runtime';
import { eventually } from '@kandev/testkit';
import { EMPTY_TRANSCRIPT, planTranscriptAppend, type TranscriptState } from '../src/domain/transcript.js';
import { transcriptInputOf } from '../src/flows/transcript.js';
import { operator, startHarness, type Harness } from './harness.js';

/** The operator's read surface at the orchestrator: listings, paging, the transcript. */
describe('read surface', () => {
  let h: Harness;
  /** Every statement the orchestrator sends while a test sets this to an array. */
  let statements: string[] | null = null;
  beforeAll(async () => {
    // Small transcript caps so the bounds are reached by a test, not by megabytes.
    h = await startHarness(
      { TRANSCRIPT_ITEM_BYTES: '2048', TRANSCRIPT_SESSION_BYTES: '8192', TRANSCRIPT_SESSION_ITEMS: '50' },
      { dbDebug: (_connection, query) => statements?.push(query) },
    );
  }, 60_000);
  afterAll(async () => h?.stop());

  const scoped = (...workspaces: string[]): OperatorActor => ({ type: 'operator', id: 'op-scoped', workspaces });
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => null,
      (e: unknown) => (e instanceof KandevError ? e.code : String(e)),
    );
  const listTasks = (workspace_id: string, extra: Record<string, unknown> = {}, actor: OperatorActor = operator) =>
    request(h.nc, OrchRead.taskList, { actor, workspace_id, ...extra });

  /** `n` tasks of a workspace inserted in one statement, with one created_at (ties broken by id). */
  async function bulkTasks(workspaceId: string, n: number, opts: { parent?: string; at?: string; title?: string } = {}) {
    await h.sql`
      INSERT INTO orchestrator.tasks (id, workspace_id, parent_id, title, created_at)
      SELECT gen_random_uuid(), ${workspaceId}, ${opts.parent ?? null}, ${opts.title ?? 'bulk'} || ' ' || g, coalesce(${opts.at ?? null}::timestamptz, now())
      FROM generate_series(1, ${n}) g`;
  }

  /** Every id of a listing, page by page, running `between` after each page. */
  async function pageAll(workspace_id: string, limit: number, between: (page: number) => Promise<void> = async () => undefined) {
    const ids: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 1_000; page++) {
      const p = await listTasks(workspace_id, { limit, ...(cursor ? { cursor } : {}) });
      ids.push(...p.items.map((t) => t.id));
      await between(page);
      if (!p.next_cursor) return ids;
      cursor = p.next_cursor;
    }
    throw new Error('paging did not end');
  }

  describe('GET /workspaces', () => {
    it('lists only the workspaces of the token, newest first, in stable pages', async () => {
      const a = await h.workspace('a');
      const b = await h.workspace('b');
      const c = await h.workspace('c');
      const mine = await request(h.nc, OrchRead.workspaceList, { actor: scoped(a.id, c.id, 'not-a-uuid') });
      expect(mine.items.map((w) => w.id)).toEqual([c.id, a.id]);
      expect(mine.items[0]).toEqual({ id: c.id, name: 'c', created_at: expect.any(String) });
      expect(mine.next_cursor).toBeNull();
      const first = await request(h.nc, OrchRead.workspaceList, { actor: operator, limit: 2 });
      expect(first.items.map((w) => w.id)).toEqual([c.id, b.id]);
      const second = await request(h.nc, OrchRead.workspaceList, { actor: operator, limit: 2, cursor: first.next_cursor! });
      expect(second.items[0]!.id).toBe(a.id);
      expect(await request(h.nc, OrchRead.workspaceList, { actor: scoped('nothing-here') })).toEqual({ items: [], next_cursor: null });
    });

    it('refuses a cursor it did not make', async () => {
      for (const cursor of [
        'garbage',
        Buffer.from('["x","y"]').toString('base64url'),
        Buffer.from('["2020-01-01 00:00:00+00\'; --","' + randomUUID() + '"]').toString('base64url'),
      ]) {
        expect(await refusal(request(h.nc, OrchRead.workspaceList, { actor: operator, cursor }))).toBe('VALIDATION_ERROR');
      }
    });
  });

  describe('GET /tasks', () => {
    it('filters by parent, roots, status (one or several) and title, with child, session and hold badges', async () => {
      const ws = await h.workspace();
      const root = await h.task(ws.id, 'Root of 100% things');
      const child = await h.task(ws.id, 'child_one', root.id);
      const other = await h.task(ws.id, 'another ROOT');
      await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: other.id, status: 'REVIEW' });
      await h.startSession(child.id, 'hello');
      await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: other.id, archived: true });

      const all = await listTasks(ws.id);
      expect(all.items.map((t) => t.id)).toEqual([other.id, child.id, root.id]);
      const r = all.items.find((t) => t.id === root.id)!;
      expect(r).toMatchObject({
        id: root.id,
        workspace_id: ws.id,
        parent_id: null,
        title: 'Root of 100% things',
        status: 'TODO',
        child_count: 1,
        active_session_count: 0,
        hold: null,
      });
      expect(all.items.find((t) => t.id === child.id)).toMatchObject({ status: 'IN_PROGRESS', child_count: 0, active_session_count: 1 });

      expect((await listTasks(ws.id, { roots: true })).items.map((t) => t.id)).toEqual([other.id, root.id]);
      expect((await listTasks(ws.id, { parent_id: root.id })).items.map((t) => t.id)).toEqual([child.id]);
      expect((await listTasks(ws.id, { status: ['REVIEW'] })).items.map((t) => t.id)).toEqual([other.id]);
      expect((await listTasks(ws.id, { status: ['REVIEW', 'TODO'] })).items.map((t) => t.id)).toEqual([other.id, root.id]);
      expect((await listTasks(ws.id, { q: 'root' })).items.map((t) => t.id)).toEqual([other.id, root.id]);
      // LIKE's own wildcards match themselves.
      expect((await listTasks(ws.id, { q: '100%' })).items.map((t) => t.id)).toEqual([root.id]);
      expect((await listTasks(ws.id, { q: 'd_o' })).items.map((t) => t.id)).toEqual([child.id]);
      expect((await listTasks(ws.id, { q: '%' })).items.map((t) => t.id)).toEqual([root.id]);
      expect((await listTasks(ws.id, { archived: false })).items.map((t) => t.id)).toEqual([child.id, root.id]);
      expect((await listTasks(ws.id, { archived: true })).items.map((t) => t.id)).toEqual([other.id]);

      const hold = await h.sql<{ id: string }[]>`
        INSERT INTO orchestrator.tree_holds (id, workspace_id, root_task_id, mode, created_by) VALUES (gen_random_uuid(), ${ws.id}, ${root.id}, 'pause', 'test') RETURNING id`;
      await h.sql`INSERT INTO orchestrator.tree_hold_members (hold_id, task_id, depth, task_status) VALUES (${hold[0]!.id}, ${root.id}, 0, 'TODO')`;
      expect((await listTasks(ws.id, { roots: true })).items.find((t) => t.id === root.id)!.hold).toEqual({ id: hold[0]!.id, mode: 'pause' });
    });

    it('refuses bad combinations, bad values and other workspaces', async () => {
      const ws = await h.workspace();
      const elsewhere = await h.workspace();
      const t = await h.task(ws.id, 't');
      expect(await refusal(listTasks(ws.id, { parent_id: t.id, roots: true }))).toBe('VALIDATION_ERROR');
      expect(await refusal(listTasks(ws.id, { status: ['NOPE'] }))).toBe('VALIDATION_ERROR');
      expect(await refusal(listTasks(ws.id, { limit: 0 }))).toBe('VALIDATION_ERROR');
      expect(await refusal(listTasks(ws.id, { cursor: 'nope' }))).toBe('VALIDATION_ERROR');
      expect(await refusal(request(h.nc, OrchRead.taskList, { actor: operator } as never))).toBe('VALIDATION_ERROR');
      expect(await refusal(listTasks(ws.id, {}, scoped(elsewhere.id)))).toBe('FORBIDDEN');
      expect(await refusal(listTasks(randomUUID()))).toBe('NOT_FOUND');
      expect(await refusal(request(h.nc, OrchRead.workspaceGet, { actor: scoped(elsewhere.id), workspace_id: ws.id }))).toBe('FORBIDDEN');
      expect(await request(h.nc, OrchRead.workspaceGet, { actor: scoped(ws.id), workspace_id: ws.id })).toMatchObject({ id: ws.id });
    });

    it('clamps a page to 200', async () => {
      const ws = await h.workspace();
      await bulkTasks(ws.id, 205);
      const p = await listTasks(ws.id, { limit: 5_000 });
      expect(p.items).toHaveLength(200);
      expect(p.next_cursor).not.toBeNull();
      expect((await listTasks(ws.id)).items).toHaveLength(50);
    });

    it('pages every task once while tasks are inserted between pages (ties on created_at broken by id)', async () => {
      const ws = await h.workspace();
      const past = new Date(Date.now() - 60_000).toISOString();
      await bulkTasks(ws.id, 60, { at: past }); // 60 rows with one created_at
      await bulkTasks(ws.id, 57);
      const before = (await h.sql<{ id: string }[]>`SELECT id FROM orchestrator.tasks WHERE workspace_id = ${ws.id}`).map((r) => r.id);
      // Between pages: new tasks (newer than every cursor), and rows committed late with an old created_at (older than the cursor).
      const seen = await pageAll(ws.id, 7, async (page) => {
        await h.task(ws.id, `new ${page}`);
        await bulkTasks(ws.id, 2, { at: past });
      });
      expect(new Set(seen).size).toBe(seen.length); // no duplicates
      const missing = before.filter((id) => !seen.includes(id));
      expect(missing).toEqual([]); // nothing that existed when paging began was skipped
    });

    it('reads a page through the keyset indexes (EXPLAIN)', async () => {
      const ws = await h.workspace();
      await bulkTasks(ws.id, 20_000);
      const parent = (await h.sql<{ id: string }[]>`SELECT id FROM orchestrator.tasks WHERE workspace_id = ${ws.id} LIMIT 1`)[0]!.id;
      await bulkTasks(ws.id, 2_000, { parent });
      await h.sql`ANALYZE orchestrator.tasks`;
      const plan = async (where: string) =>
        (
          await h.sql.unsafe<{ 'QUERY PLAN': string }[]>(
            `EXPLAIN SELECT id FROM orchestrator.tasks t WHERE t.workspace_id = $1 ${where} AND (t.created_at, t.id) < (now(), '${randomUUID()}'::uuid) ORDER BY t.created_at DESC, t.id DESC LIMIT 51`,
            [ws.id],
          )
        )
          .map((r) => r['QUERY PLAN'])
          .join('\n');
      const all = await plan('');
      expect(all).toMatch(/Index (Only )?Scan using tasks_workspace_page/);
      expect(all).not.toMatch(/Sort/);
      expect(await plan('AND t.parent_id IS NULL')).toMatch(/Index (Only )?Scan using tasks_workspace_roots_page/);
      expect(await plan(`AND t.parent_id = '${parent}'`)).toMatch(/Index (Only )?Scan using tasks_parent_page/);
      expect(await plan(`AND t.status = 'TODO'`)).toMatch(/Index (Only )?Scan using tasks_workspace_(status_)?page/);
    }, 60_000);
  });

  describe('GET /tasks/:id', () => {
    it('reads the task with its sessions oldest first, in one statement; other workspaces are refused and unknown ids not found', async () => {
      const w = await h.workspace('task-detail');
      const task = await h.task(w.id, 'task-detail');
      expect(await request(h.nc, Orch.taskGet, { actor: operator, task_id: task.id })).toMatchObject({ id: task.id, workspace_id: w.id, sessions: [] });
      const [older, newer] = [randomUUID(), randomUUID()];
      await h.sql`
        INSERT INTO orchestrator.sessions (id, task_id, state, agent, created_at) VALUES
          (${newer}, ${task.id}, 'WAITING_FOR_INPUT', 'sleep', '2026-01-01T00:00:02Z'),
          (${older}, ${task.id}, 'COMPLETED', 'sleep', '2026-01-01T00:00:01Z')`;
      statements = [];
      const detail = await request(h.nc, Orch.taskGet, { actor: operator, task_id: task.id });
      const sent = statements;
      statements = null;
      expect(detail).toMatchObject({ id: task.id, workspace_id: w.id, title: 'task-detail', status: task.status });
      expect(detail.sessions.map((s) => [s.id, s.state])).toEqual([
        [older, 'COMPLETED'],
        [newer, 'WAITING_FOR_INPUT'],
      ]);
      expect(sent.filter((q) => /\b(tasks|sessions)\b/.test(q))).toHaveLength(1);
      expect(await refusal(request(h.nc, Orch.taskGet, { actor: scoped(randomUUID()), task_id: task.id }))).toBe('FORBIDDEN');
      expect(await refusal(request(h.nc, Orch.taskGet, { actor: operator, task_id: randomUUID() }))).toBe('NOT_FOUND');
    });

    it('carries the active hold the task is a member of, as GET /tasks lists it, and null once released', async () => {
      const w = await h.workspace('task-detail-hold');
      const root = await h.task(w.id, 'held root');
      const child = await h.task(w.id, 'held child', root.id);
      expect((await request(h.nc, Orch.taskGet, { actor: operator, task_id: root.id })).hold).toBeNull();
      const { hold } = await request(h.nc, OrchTree.pause, { actor: operator, task_id: root.id });
      for (const id of [root.id, child.id])
        expect((await request(h.nc, Orch.taskGet, { actor: operator, task_id: id })).hold).toEqual({ id: hold.id, mode: 'pause' });
      const [listed] = (await listTasks(w.id, { roots: true })).items;
      expect(listed!.hold).toEqual({ id: hold.id, mode: 'pause' });
      // Released as a resume leaves it (the resume itself needs the holds service, not in this harness).
      await h.sql`UPDATE orchestrator.tree_hold_members SET active = false WHERE hold_id = ${hold.id}`;
      expect((await request(h.nc, Orch.taskGet, { actor: operator, task_id: child.id })).hold).toBeNull();
    });
  });

  describe('GET /sessions/:id', () => {
    it('reads the session with its turns oldest first (ties by id), in one statement; other workspaces are refused and unknown ids not found', async () => {
      const w = await h.workspace('detail');
      const task = await h.task(w.id, 'detail');
      const [session] = await h.sql<{ id: string }[]>`
        INSERT INTO orchestrator.sessions (id, task_id, state, agent, started_at, execution_id)
        VALUES (gen_random_uuid(), ${task.id}, 'WAITING_FOR_INPUT', 'sleep', now(), NULL) RETURNING id`;
      const sid = session!.id;
      const read = () => request(h.nc, Orch.sessionGet, { actor: operator, session_id: sid });
      const none = await read();
      expect(none).toMatchObject({ id: sid, task_id: task.id, state: 'WAITING_FOR_INPUT', execution: null, turns: [] });

      // Inserted out of order; two start at the same instant, so the id decides between them.
      const [a, b] = [randomUUID(), randomUUID()].sort() as [string, string];
      const c = randomUUID();
      await h.sql`
        INSERT INTO orchestrator.turns (id, session_id, started_at, completed_at, stop_reason) VALUES
          (${c}, ${sid}, '2026-01-01T00:00:02Z', NULL, NULL),
          (${b}, ${sid}, '2026-01-01T00:00:01Z', '2026-01-01T00:00:01.5Z', 'cancelled'),
          (${a}, ${sid}, '2026-01-01T00:00:01Z', '2026-01-01T00:00:01.25Z', 'end_turn')`;
      statements = [];
      const detail = await read();
      const sent = statements;
      statements = null;
      expect(detail.turns).toEqual([
        { id: a, started_at: '2026-01-01T00:00:01.000Z', completed_at: '2026-01-01T00:00:01.250Z', stop_reason: 'end_turn' },
        { id: b, started_at: '2026-01-01T00:00:01.000Z', completed_at: '2026-01-01T00:00:01.500Z', stop_reason: 'cancelled' },
        { id: c, started_at: '2026-01-01T00:00:02.000Z', completed_at: null, stop_reason: null },
      ]);
      expect(detail).toMatchObject({ id: sid, task_id: task.id, state: 'WAITING_FOR_INPUT', agent: 'sleep', execution: null });
      // One snapshot without a transaction around it: one statement reads the session, its task's
      // workspace and its turns (other statements, the outbox's marks of the setup's events, may pass meanwhile).
      expect(sent.filter((q) => /\b(sessions|turns)\b/.test(q))).toHaveLength(1);

      expect(await refusal(request(h.nc, Orch.sessionGet, { actor: scoped(randomUUID()), session_id: sid }))).toBe('FORBIDDEN');
      expect(await refusal(request(h.nc, Orch.sessionGet, { actor: operator, session_id: randomUUID() }))).toBe('NOT_FOUND');
    });
  });

  describe('transcript', () => {
    async function liveSession(prompt = 'first prompt') {
      const ws = await h.workspace();
      const task = await h.task(ws.id, 'talker');
      const s = await h.startSession(task.id, prompt);
      const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
      return { ws, task, s, e, scope: { workspace_id: ws.id, task_id: task.id, session_id: s.id } };
    }
    const messages = (session_id: string, extra: { after_seq?: number; limit?: number } = {}, actor: OperatorActor = operator) =>
      request(h.nc, OrchRead.sessionMessages, { actor, session_id, ...extra });
    const consumed = (eventId: string) =>
      eventually(
        async () => (await h.sql`SELECT 1 FROM orchestrator.inbox WHERE consumer = 'orchestrator-transcript' AND event_id = ${eventId}`).length > 0,
        10_000,
        20,
      );
    function watch(sessionId: string) {
      const seen: SessionMessageData[] = [];
      const sub = h.nc.subscribe(eventSubject('session.message'), {
        callback: (_e, m) => {
          const ev = JSON.parse(new TextDecoder().decode(m.data)) as EventEnvelope<'session.message'>;
          if (ev.session_id === sessionId) seen.push(ev.data);
        },
      });
      return { seen, stop: () => sub.unsubscribe() };
    }
    /** Item texts by seq, from pushes applied as the console applies them (console/src/model.ts applyPush). */
    function rebuilt(seen: readonly SessionMessageData[]): Map<number, string> {
      const texts = new Map<number, string>();
      for (const m of seen) {
        if (m.op === 'appended') {
          if (!texts.has(m.seq)) throw new Error(`appended to item ${m.seq} before it was created`);
          // The offset is the item's size in UTF-8 bytes before this chunk (what a console checks it against).
          if (m.offset !== raw.encode(texts.get(m.seq)!).length)
            throw new Error(`appended to item ${m.seq} at offset ${m.offset}, held ${raw.encode(texts.get(m.seq)!).length} bytes`);
          texts.set(m.seq, texts.get(m.seq)! + m.text);
        } else texts.set(m.seq, m.text);
      }
      return texts;
    }
    const raw = new TextEncoder();
    /** Publish an envelope as it is (its id kept), under a fresh Nats-Msg-Id: to the consumer, a redelivery when the id was seen. */
    const republish = (ev: EventEnvelope) => jetstream(h.nc).publish(eventSubject(ev.type), raw.encode(JSON.stringify(ev)), { msgID: randomUUID() });
    /** A burst: every event published without waiting for the one before (JetStream keeps one connection's order). */
    const burst = (evs: readonly EventEnvelope[]) => Promise.all(evs.map((ev) => republish(ev)));
    const chunkEv = (scope: { workspace_id: string; task_id: string; session_id: string }, execution_id: string, turn_id: string, text: string) =>
      buildEvent('agent.message', scope, { execution_id, turn_id, text }) as EventEnvelope;
    /** The session's items as [kind, text], and the inbox rows of the transcript consumer for these ids. */
    const itemsOf = async (session_id: string) => (await messages(session_id, { limit: 200 })).items.map((i) => [i.kind, i.text]);

    it('keeps the prompt, coalesces a turn’s chunks into one item, pushes each chunk with the item’s seq', async () => {
      const { s, e, scope } = await liveSession();
      const w = watch(s.id);
      const pub = new EventPublisher(h.nc);
      const turn = e.turn_id!;
      let last = '';
      for (const text of ['hel', 'lo', ' world']) last = (await pub.emit('agent.message', scope, { execution_id: e.execution_id, turn_id: turn, text })).id;
      await consumed(last);
      const page = await messages(s.id);
      expect(page.items).toEqual([
        { seq: 1, turn_id: turn, role: 'user', kind: 'prompt', text: 'first prompt', meta: {}, created_at: expect.any(String) },
        { seq: 2, turn_id: turn, role: 'agent', kind: 'agent_text', text: 'hello world', meta: {}, created_at: expect.any(String) },
      ]);
      expect(page.next_cursor).toBeNull();
      // Chunks that arrive together are one write and one push (ADR 0035): the pushes, applied as a
      // console does (created = the text so far, appended = text added), rebuild the item.
      await eventually(async () => rebuilt(w.seen).get(2) === 'hello world');
      w.stop();
      expect(w.seen[0]).toMatchObject({ op: 'created', seq: 2 });
      expect(w.seen.every((m) => m.seq === 2)).toBe(true);

      // A tool call closes the item; text after it is a new item; a new turn's prompt and text are new items.
      const t1 = (
        await pub.emit('agent.tool_call', scope, {
          execution_id: e.execution_id,
          turn_id: turn,
          tool_call_id: 'tc1',
          phase: 'started',
          title: 'ls',
          kind: 'execute',
          text: '{"path":"."}',
        })
      ).id;
      const t2 = (
        await pub.emit('agent.tool_call', scope, {
          execution_id: e.execution_id,
          turn_id: turn,
          tool_call_id: 'tc1',
          phase: 'completed',
          title: null,
          kind: null,
          text: 'a b c',
        })
      ).id;
      const after = (await pub.emit('agent.message', scope, { execution_id: e.execution_id, turn_id: turn, text: 'done' })).id;
      await Promise.all([consumed(t1), consumed(t2), consumed(after)]);
      // The turn ends (the agent is idle again); the next prompt opens another.
      e.status = 'READY';
      await pub.emit('turn.completed', scope, { execution_id: e.execution_id, turn_id: turn, stop_reason: 'end_turn' });
      await eventually(async () => (await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id })).state === 'WAITING_FOR_INPUT');
      const second = await request(h.nc, Orch.sessionPrompt, { actor: operator, session_id: s.id, prompt: 'again' });
      const more = (await pub.emit('agent.message', scope, { execution_id: e.execution_id, turn_id: second.turn_id, text: 'more' })).id;
      await consumed(more);
      const items = (await messages(s.id, { after_seq: 2 })).items;
      expect(items.map((i) => [i.seq, i.kind, i.text])).toEqual([
        [3, 'tool_call', 'ls\n{"path":"."}'],
        [4, 'tool_result', 'a b c'],
        [5, 'agent_text', 'done'],
        [6, 'prompt', 'again'],
        [7, 'agent_text', 'more'],
      ]);
      expect(items[1]!.meta).toMatchObject({ tool_call_id: 'tc1', status: 'completed' });
      // Paging: after_seq + limit, next_cursor = the last seq read.
      const p1 = await messages(s.id, { limit: 2 });
      expect(p1.items.map((i) => i.seq)).toEqual([1, 2]);
      expect(p1.next_cursor).toBe('2');
    });

    it('a redelivered chunk does not repeat its text (B-5)', async () => {
      const { s, e, scope } = await liveSession();
      const ev = buildEvent('agent.message', scope, { execution_id: e.execution_id, turn_id: e.turn_id!, text: 'once' });
      const js = jetstream(h.nc);
      const bytes = new TextEncoder().encode(JSON.stringify(ev));
      // The same event twice, past JetStream's dedupe (another Nats-Msg-Id): what a redelivery looks like to the consumer.
      await js.publish(eventSubject('agent.message'), bytes, { msgID: randomUUID() });
      await js.publish(eventSubject('agent.message'), bytes, { msgID: randomUUID() });
      const marker = await new EventPublisher(h.nc).emit('agent.message', scope, { execution_id: e.execution_id, turn_id: e.turn_id!, text: '!' });
      await consumed(marker.id);
      const items = (await messages(s.id)).items;
      expect(items.map((i) => [i.kind, i.text])).toEqual([
        ['prompt', 'first prompt'],
        ['agent_text', 'once!'],
      ]);
    });

    it('bounds an item and a session: long text continues in new items, past the session cap one truncated marker', async () => {
      const { s, e, scope } = await liveSession('p');
      const pub = new EventPublisher(h.nc);
      const send = (text: string) => pub.emit('agent.message', scope, { execution_id: e.execution_id, turn_id: e.turn_id!, text });
      // 3,000 bytes with a 2,048-byte item cap: one full item, the rest in the next.
      let last = await send('x'.repeat(3_000));
      await consumed(last.id);
      let items = (await messages(s.id)).items;
      expect(items.map((i) => [i.kind, i.text.length])).toEqual([
        ['prompt', 1],
        ['agent_text', 2_048],
        ['agent_text', 952],
      ]);
      // 8,192 bytes per session: 3,001 used; 6,000 more cross it.
      for (let i = 0; i < 3; i++) last = await send('y'.repeat(2_000));
      last = await send('z'.repeat(10));
      await consumed(last.id);
      items = (await messages(s.id)).items;
      const total = items.filter((i) => i.kind !== 'truncated').reduce((n, i) => n + Buffer.byteLength(i.text), 0);
      expect(total).toBeLessThanOrEqual(8_192);
      expect(items.at(-1)).toMatchObject({ kind: 'truncated', role: 'system' });
      expect(items.filter((i) => i.kind === 'truncated')).toHaveLength(1);
      expect(items.map((i) => i.seq)).toEqual(items.map((_, i) => i + 1));
      const [state] = await h.sql<{ truncated: boolean }[]>`SELECT truncated FROM orchestrator.transcript_state WHERE session_id = ${s.id}`;
      expect(state!.truncated).toBe(true);
    });

    it('a burst is written in runs (fewer writes than chunks), in order, each chunk once; the pushes rebuild the text', async () => {
      const { s, e, scope } = await liveSession('p');
      const w = watch(s.id);
      const chunks = Array.from({ length: 300 }, (_, i) => chunkEv(scope, e.execution_id, e.turn_id!, `${i},`));
      // Every 7th chunk delivered twice in the burst (within a run, or in the next one).
      const delivered = chunks.flatMap((c, i) => (i % 7 === 0 ? [c, c] : [c]));
      await burst(delivered);
      await consumed(chunks.at(-1)!.id);
      // Chunks of the first burst delivered again after their runs committed, then one new chunk.
      const tail = chunkEv(scope, e.execution_id, e.turn_id!, 'end');
      await burst([chunks[0]!, chunks[150]!, chunks[299]!, tail]);
      await consumed(tail.id);
      const text = chunks.map((c) => (c.data as { text: string }).text).join('') + 'end';
      expect(await itemsOf(s.id)).toEqual([
        ['prompt', 'p'],
        ['agent_text', text],
      ]);
      await eventually(async () => rebuilt(w.seen).get(2) === text);
      w.stop();
      // Batched: one push per run, not per chunk.
      expect(w.seen.length).toBeLessThan(chunks.length);
      const [n] = await h.sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM orchestrator.inbox WHERE consumer = 'orchestrator-transcript' AND event_id = ANY(${[...chunks, tail].map((c) => c.id)})`;
      expect(n!.n).toBe(chunks.length + 1);
    });

    it('keeps each session’s order when the bursts of two sessions interleave', async () => {
      const a = await liveSession('a');
      const b = await liveSession('b');
      const ca = Array.from({ length: 120 }, (_, i) => chunkEv(a.scope, a.e.execution_id, a.e.turn_id!, `a${i} `));
      const cb = Array.from({ length: 120 }, (_, i) => chunkEv(b.scope, b.e.execution_id, b.e.turn_id!, `b${i} `));
      await burst(ca.flatMap((x, i) => [x, cb[i]!]));
      await Promise.all([consumed(ca.at(-1)!.id), consumed(cb.at(-1)!.id)]);
      const joined = (cs: EventEnvelope[]) => cs.map((c) => (c.data as { text: string }).text).join('');
      expect(await itemsOf(a.s.id)).toEqual([
        ['prompt', 'a'],
        ['agent_text', joined(ca)],
      ]);
      expect(await itemsOf(b.s.id)).toEqual([
        ['prompt', 'b'],
        ['agent_text', joined(cb)],
      ]);
    });

    it('caps reached inside a run: the same items as one chunk at a time, one marker, nothing after', async () => {
      const { s, e, scope } = await liveSession('p');
      const caps = { itemBytes: 2048, sessionBytes: 8192, sessionItems: 50 };
      // 100 chunks of 100 bytes, with a tool call in the middle: crosses the item cap and then the session's.
      const evs: EventEnvelope[] = Array.from({ length: 100 }, (_, i) =>
        i === 40
          ? (buildEvent('agent.tool_call', scope, {
              execution_id: e.execution_id,
              turn_id: e.turn_id!,
              tool_call_id: 'tc',
              phase: 'started',
              title: 'ls',
              kind: 'execute',
              text: 'x'.repeat(3000),
            }) as EventEnvelope)
          : chunkEv(scope, e.execution_id, e.turn_id!, String(i).padStart(3, '0').repeat(33) + '|'),
      );
      const w = watch(s.id);
      await burst(evs);
      await consumed(evs.at(-1)!.id);
      // The reference: the prompt, then each event planned alone (what the one-at-a-time consumer wrote).
      let state: TranscriptState = EMPTY_TRANSCRIPT;
      const expected = new Map<number, [string, string]>();
      for (const input of [{ turn_id: e.turn_id!, role: 'user' as const, kind: 'prompt' as const, text: 'p' }, ...evs.map((ev) => transcriptInputOf(ev)!)]) {
        const r = planTranscriptAppend(state, input, caps);
        for (const x of r.writes) expected.set(x.seq, [x.kind, (x.op === 'appended' ? expected.get(x.seq)![1] : '') + x.text]);
        state = r.state;
      }
      expect(state.truncated).toBe(true);
      expect(await itemsOf(s.id)).toEqual([...expected.values()]);
      const late = chunkEv(scope, e.execution_id, e.turn_id!, 'late');
      await burst([late]);
      await consumed(late.id);
      expect(await itemsOf(s.id)).toEqual([...expected.values()]);
      await eventually(async () => rebuilt(w.seen).size === expected.size - 1);
      w.stop();
      expect([...rebuilt(w.seen).values()]).toEqual([...expected.values()].slice(1).map(([, t]) => t));
    });

    it('refuses another workspace’s session and an unknown one', async () => {
      const { s } = await liveSession();
      const other = await h.workspace();
      expect(await refusal(messages(s.id, {}, scoped(other.id)))).toBe('FORBIDDEN');
      expect(await refusal(messages(randomUUID()))).toBe('NOT_FOUND');
    });
  });
});
