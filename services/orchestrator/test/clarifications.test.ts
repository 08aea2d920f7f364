import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Orch, OrchClarification, OrchMcpClarification, type ClarificationBundleView, type OperatorActor } from '@kandev/contracts';
import { EventPublisher, parseEvent, request } from '@kandev/runtime';
import { agentToken, operator, startHarness, type Harness } from './harness.js';

/** R-5 at the orchestrator: bundles on the turn in flight, responses, cancel, detach and supersede, and the races. */
describe('clarifications', () => {
  let h: Harness;
  const events: Array<{ type: string; bundle: { id: string; status: string } }> = [];
  beforeAll(async () => {
    h = await startHarness();
    h.nc.subscribe('kandev.evt.clarification.>', {
      callback: (_e, msg) => {
        const ev = parseEvent(msg.data);
        events.push({ type: ev.type, bundle: (ev.data as { bundle: { id: string; status: string } }).bundle });
      },
    });
  });
  afterAll(async () => h?.stop());

  /** A task whose session has a turn in flight (the fake lifecycle runs the first prompt). */
  async function working() {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'asks');
    const session = await h.startSession(task.id, 'work');
    return { ws, task, session };
  }
  const ask = async (
    task_id: string,
    session_id?: string,
    questions: Array<{ id?: string; text: string; options?: string[] }> = [
      { id: 'a', text: 'A?' },
      { id: 'b', text: 'B?' },
    ],
  ) =>
    request(h.nc, OrchMcpClarification.ask, {
      caller_task_id: task_id,
      agent_token: await agentToken(task_id),
      ...(session_id ? { caller_session_id: session_id } : {}),
      questions,
    });
  const respond = (
    bundle_id: string,
    body: { answers?: Array<{ question_id: string; answer: string }>; rejected?: true; reason?: string },
    actor: OperatorActor = operator,
  ) => request(h.nc, OrchClarification.respond, { actor, bundle_id, ...body });
  const get = (bundle_id: string) => request(h.nc, OrchClarification.get, { actor: operator, bundle_id });
  const cancel = (bundle_id: string) => request(h.nc, OrchClarification.cancel, { actor: operator, bundle_id });
  const renew = async (task_id: string, bundle_id: string) =>
    request(h.nc, OrchMcpClarification.renew, { caller_task_id: task_id, agent_token: await agentToken(task_id), bundle_id });
  const lapseLease = (bundle_id: string) =>
    h.sql`UPDATE orchestrator.clarification_bundles SET waiter_lease_until = now() - interval '1 second' WHERE id = ${bundle_id}`;
  const statuses = (b: ClarificationBundleView) => Object.fromEntries(b.questions.map((q) => [q.id, q.status]));
  async function until<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, ms = 5_000): Promise<T> {
    const end = Date.now() + ms;
    for (;;) {
      const v = await fn();
      if (v !== undefined) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it('persists the bundle on the turn in flight with every question pending and publishes clarification.requested', async () => {
    const { task, session } = await working();
    const detail = await request(h.nc, Orch.sessionGet, { actor: operator, session_id: session.id });
    const wait = await ask(task.id, session.id, [
      { text: 'Which db?', options: ['pg', 'sqlite'] },
      { id: 'why', text: 'Why?' },
    ]);
    expect(wait.expires_in_ms).toBeGreaterThan(0);
    expect(wait.renew_every_ms).toBeGreaterThan(0);
    expect(wait.bundle).toMatchObject({
      task_id: task.id,
      session_id: session.id,
      turn_id: detail.turns[0]!.id,
      status: 'pending',
      waiter_live: true,
      detached: false,
      superseded: false,
      active: true,
      agent_resumed: null,
      questions: [
        { id: 'q1', text: 'Which db?', options: ['pg', 'sqlite'], status: 'pending', answer: null },
        { id: 'why', text: 'Why?', options: null, status: 'pending', answer: null },
      ],
    });
    expect(await get(wait.bundle.id)).toEqual({ ...wait.bundle });
    await until('requested event', () => events.find((e) => e.type === 'clarification.requested' && e.bundle.id === wait.bundle.id));
    const ofTask = await request(h.nc, OrchClarification.ofTask, { actor: operator, task_id: task.id });
    expect(ofTask.active?.id).toBe(wait.bundle.id);
  });

  it('finds the turn in flight when the token names no session, and refuses when there is none', async () => {
    const { task } = await working();
    expect((await ask(task.id)).bundle.status).toBe('pending');
    const ws = await h.workspace();
    const idle = await h.task(ws.id, 'idle');
    const s = await h.startSession(idle.id); // no prompt: no turn
    await expect(ask(idle.id)).rejects.toMatchObject({ code: 'CONFLICT' });
    await expect(ask(idle.id, s.id)).rejects.toMatchObject({ code: 'CONFLICT' });
    await expect(ask(idle.id, (await working()).session.id)).rejects.toMatchObject({ code: 'NOT_FOUND' }); // another task's session
    await expect(
      ask(task.id, undefined, [
        { id: 'x', text: '1' },
        { id: 'x', text: '2' },
      ]),
    ).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
  });

  it('an agent asking while the prompt that started its turn is still being dispatched gets that turn, not CONFLICT', async () => {
    // A prompt dispatch holds the session's guard from inserting the turn until lifecycle has handed
    // the prompt to the agent, so a fast agent asks before the turn is committed. Played here by hand:
    // the old turn is over, a transaction holds the guard with the new turn uncommitted, the agent asks.
    const { task, session } = await working();
    await h.sql`UPDATE orchestrator.turns SET completed_at = now(), stop_reason = 'cancelled' WHERE session_id = ${session.id}`;
    await h.sql`UPDATE orchestrator.sessions SET state = 'WAITING_FOR_INPUT' WHERE id = ${session.id}`;
    let releaseDispatch!: () => void;
    const dispatched = new Promise<void>((r) => (releaseDispatch = r));
    let newTurn = '';
    const dispatch = h.sql.begin(async (tx) => {
      await tx`SELECT id FROM orchestrator.sessions WHERE id = ${session.id} FOR UPDATE`;
      const [turn] = await tx<
        { id: string }[]
      >`INSERT INTO orchestrator.turns (id, session_id, prompt) VALUES (gen_random_uuid(), ${session.id}, 'next') RETURNING id`;
      newTurn = turn!.id;
      await tx`UPDATE orchestrator.sessions SET state = 'RUNNING' WHERE id = ${session.id}`;
      await dispatched;
    });
    await until('the dispatch to hold the guard', async () => (newTurn ? true : undefined));
    const asked = Promise.allSettled([ask(task.id), ask(task.id, session.id, [{ id: 'c', text: 'C?' }])]);
    try {
      // Both asks queue behind the guard (neither answers before the dispatch commits).
      await until('both asks to wait on the guard', async () => {
        const [waiting] = await h.sql<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`;
        return waiting!.n >= 2 ? true : undefined;
      }).catch(() => undefined);
    } finally {
      releaseDispatch();
      await dispatch;
    }
    const [byTask, bySession] = (await asked).map((r) => (r.status === 'fulfilled' ? r.value : { refused: String(r.reason) }));
    expect(byTask).toMatchObject({ bundle: { session_id: session.id, turn_id: newTurn, status: 'pending' } });
    expect(bySession).toMatchObject({ bundle: { session_id: session.id, turn_id: newTurn, status: 'pending' } });
  });

  it('a released waiter (its client went away) detaches the bundle at once; a later answer resumes nobody; a closed bundle stays as it is', async () => {
    const { task, session } = await working();
    const { bundle } = await ask(task.id, session.id);
    const release = async (bundle_id: string) =>
      request(h.nc, OrchMcpClarification.release, { caller_task_id: task.id, agent_token: await agentToken(task.id), bundle_id });
    const released = await release(bundle.id);
    expect(released.bundle).toMatchObject({ status: 'pending', waiter_live: false, detached: true, detached_reason: 'caller_gone' });
    const answered = await respond(bundle.id, {
      answers: [
        { question_id: 'a', answer: '1' },
        { question_id: 'b', answer: '2' },
      ],
    });
    expect(answered).toMatchObject({ status: 'answered', agent_resumed: false, detached: true });
    expect((await release(bundle.id)).bundle).toMatchObject({ status: 'answered', detached_reason: 'caller_gone' });
    const other = await working();
    const foreign = (await ask(other.task.id, other.session.id)).bundle.id;
    await expect(release(foreign)).rejects.toMatchObject({ code: 'NOT_FOUND' }); // another task's bundle
  });

  it('answers: the bundle closes once nothing is pending, the waiter would get it, a second response is CONFLICT with the final state', async () => {
    const { task, session } = await working();
    const { bundle } = await ask(task.id, session.id);
    const partial = await respond(bundle.id, { answers: [{ question_id: 'a', answer: 'yes' }] });
    expect(partial).toMatchObject({ status: 'pending', waiter_live: true });
    expect(statuses(partial)).toEqual({ a: 'answered', b: 'pending' });
    const done = await respond(bundle.id, { answers: [{ question_id: 'b', answer: 'no' }] });
    expect(done).toMatchObject({ status: 'answered', agent_resumed: true, detached: false, active: false });
    expect(done.questions.map((q) => q.answer)).toEqual(['yes', 'no']);
    await until('closed event', () => events.find((e) => e.type === 'clarification.closed' && e.bundle.id === bundle.id));
    const err = await respond(bundle.id, { rejected: true }).catch((e) => e);
    expect(err).toMatchObject({ code: 'CONFLICT', details: { status: 'answered' } });
    expect((await renew(task.id, bundle.id)).bundle.status).toBe('answered');
  });

  it('refuses a response naming an unknown question and applies none of it', async () => {
    const { task, session } = await working();
    const { bundle } = await ask(task.id, session.id);
    await expect(
      respond(bundle.id, {
        answers: [
          { question_id: 'a', answer: 'x' },
          { question_id: 'nope', answer: 'y' },
        ],
      }),
    ).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(statuses(await get(bundle.id))).toEqual({ a: 'pending', b: 'pending' });
  });

  it('skip all rejects every still-pending question and leaves answered siblings as they are (R-5.2)', async () => {
    const { task, session } = await working();
    const { bundle } = await ask(task.id, session.id);
    await respond(bundle.id, { answers: [{ question_id: 'a', answer: 'yes' }] });
    const skipped = await respond(bundle.id, { rejected: true, reason: 'not now' });
    expect(skipped).toMatchObject({ status: 'rejected', reason: 'not now', agent_resumed: true });
    expect(skipped.questions).toMatchObject([
      { id: 'a', status: 'answered', answer: 'yes' },
      { id: 'b', status: 'rejected', answer: null },
    ]);
  });

  it.each([
    ['reject vs reject', { rejected: true as const }, { rejected: true as const }],
    [
      'answer vs reject',
      {
        answers: [
          { question_id: 'a', answer: '1' },
          { question_id: 'b', answer: '2' },
        ],
      },
      { rejected: true as const },
    ],
    [
      'answer vs answer',
      {
        answers: [
          { question_id: 'a', answer: '1' },
          { question_id: 'b', answer: '2' },
        ],
      },
      {
        answers: [
          { question_id: 'a', answer: '3' },
          { question_id: 'b', answer: '4' },
        ],
      },
    ],
  ])('two concurrent responses (%s): exactly one wins, the other learns it lost', async (_name, first, second) => {
    const { task, session } = await working();
    for (let round = 0; round < 5; round++) {
      const { bundle } = await ask(task.id, session.id);
      const results = await Promise.allSettled([respond(bundle.id, first), respond(bundle.id, second)]);
      const won = results.filter((r) => r.status === 'fulfilled');
      const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(1);
      expect(lost[0]!.reason).toMatchObject({ code: 'CONFLICT' });
      const final = await get(bundle.id);
      expect(final.status).toBe((won[0] as PromiseFulfilledResult<ClarificationBundleView>).value.status);
      const closes = () => events.filter((e) => e.type === 'clarification.closed' && e.bundle.id === bundle.id);
      await until('the closed event', () => (closes().length ? true : undefined));
      expect(closes()).toHaveLength(1);
    }
  });

  describe('cancel (R-5.5)', () => {
    it('cancels a bundle with a live waiter: questions cancelled, event published', async () => {
      const { task, session } = await working();
      const { bundle } = await ask(task.id, session.id);
      const done = await cancel(bundle.id);
      expect(done).toMatchObject({ status: 'cancelled', agent_resumed: true });
      expect(statuses(done)).toEqual({ a: 'cancelled', b: 'cancelled' });
      await until('closed event', () => events.find((e) => e.type === 'clarification.closed' && e.bundle.id === bundle.id && e.bundle.status === 'cancelled'));
      await expect(cancel(bundle.id)).rejects.toMatchObject({ code: 'CONFLICT', details: { status: 'cancelled' } });
    });

    it('is NOT_FOUND without a live waiter (lease lapsed), and that bundle can still be rejected', async () => {
      const { task, session } = await working();
      const { bundle } = await ask(task.id, session.id);
      await lapseLease(bundle.id);
      expect(await get(bundle.id)).toMatchObject({ status: 'pending', waiter_live: false, detached: true, detached_reason: 'waiter_lost', active: true });
      await expect(cancel(bundle.id)).rejects.toMatchObject({ code: 'NOT_FOUND' });
      expect((await get(bundle.id)).status).toBe('pending');
      const rejected = await respond(bundle.id, { rejected: true });
      expect(rejected).toMatchObject({ status: 'rejected', detached: true, detached_reason: 'waiter_lost', agent_resumed: false });
    });

    it('is NOT_FOUND for an unknown bundle', async () => {
      await expect(cancel('00000000-0000-4000-8000-0000000000aa')).rejects.toMatchObject({ code: 'NOT_FOUND' });
    });
  });

  describe('the waiter lease', () => {
    it('is extended by a renewal; a renewal after it lapsed records the waiter as lost for good', async () => {
      const { task, session } = await working();
      const { bundle } = await ask(task.id, session.id);
      const [before] = await h.sql<{ until: Date }[]>`SELECT waiter_lease_until AS until FROM orchestrator.clarification_bundles WHERE id = ${bundle.id}`;
      await new Promise((r) => setTimeout(r, 20));
      expect((await renew(task.id, bundle.id)).bundle.waiter_live).toBe(true);
      const [after] = await h.sql<{ until: Date }[]>`SELECT waiter_lease_until AS until FROM orchestrator.clarification_bundles WHERE id = ${bundle.id}`;
      expect(after!.until.getTime()).toBeGreaterThan(before!.until.getTime());
      await lapseLease(bundle.id);
      expect((await renew(task.id, bundle.id)).bundle).toMatchObject({ detached: true, detached_reason: 'waiter_lost' });
      await h.sql`UPDATE orchestrator.clarification_bundles SET waiter_lease_until = now() + interval '1 hour' WHERE id = ${bundle.id}`;
      expect((await renew(task.id, bundle.id)).bundle).toMatchObject({ waiter_live: false, detached: true }); // sticky
    });

    it('belongs to the asking task: another task cannot renew or expire it', async () => {
      const { task, session } = await working();
      const other = await working();
      const { bundle } = await ask(task.id, session.id);
      await expect(renew(other.task.id, bundle.id)).rejects.toMatchObject({ code: 'NOT_FOUND' });
      await expect(
        request(h.nc, OrchMcpClarification.expire, { caller_task_id: other.task.id, agent_token: await agentToken(other.task.id), bundle_id: bundle.id }),
      ).rejects.toMatchObject({ code: 'NOT_FOUND' });
    });

    it("expires the live waiter's still-pending questions; a detached bundle is left for the operator", async () => {
      const { task, session } = await working();
      const { bundle } = await ask(task.id, session.id);
      await respond(bundle.id, { answers: [{ question_id: 'a', answer: 'kept' }] });
      const expired = await request(h.nc, OrchMcpClarification.expire, {
        caller_task_id: task.id,
        agent_token: await agentToken(task.id),
        bundle_id: bundle.id,
      });
      expect(expired.expires_in_ms).toBe(0);
      expect(expired.bundle).toMatchObject({ status: 'expired', agent_resumed: true });
      expect(statuses(expired.bundle)).toEqual({ a: 'answered', b: 'expired' });

      const second = await ask(task.id, session.id);
      await lapseLease(second.bundle.id);
      const untouched = await request(h.nc, OrchMcpClarification.expire, {
        caller_task_id: task.id,
        agent_token: await agentToken(task.id),
        bundle_id: second.bundle.id,
      });
      expect(untouched.bundle).toMatchObject({ status: 'pending', detached: true });
    });
  });

  describe('detached bundles (R-5.3)', () => {
    it('a turn cancel detaches the pending bundle; rejecting it persists and closes it without resuming the agent', async () => {
      const { task, session } = await working();
      const { bundle } = await ask(task.id, session.id);
      await request(h.nc, Orch.agentCancel, { actor: operator, session_id: session.id });
      expect(await get(bundle.id)).toMatchObject({ status: 'pending', waiter_live: false, detached: true, detached_reason: 'turn_cancelled' });
      expect((await renew(task.id, bundle.id)).bundle.detached).toBe(true);
      await expect(cancel(bundle.id)).rejects.toMatchObject({ code: 'NOT_FOUND' });
      const rejected = await respond(bundle.id, { rejected: true });
      expect(rejected).toMatchObject({ status: 'rejected', agent_resumed: false, detached_reason: 'turn_cancelled' });
      expect(statuses(rejected)).toEqual({ a: 'rejected', b: 'rejected' });
      await expect(respond(bundle.id, { rejected: true })).rejects.toMatchObject({ code: 'CONFLICT' });
    });

    it('a turn cancel names itself as the reason even when the waiting call was released first (the agent dropped it as its turn was cancelled)', async () => {
      const { task, session } = await working();
      const { bundle } = await ask(task.id, session.id);
      await request(h.nc, OrchMcpClarification.release, { caller_task_id: task.id, agent_token: await agentToken(task.id), bundle_id: bundle.id });
      expect(await get(bundle.id)).toMatchObject({ detached: true, detached_reason: 'caller_gone' });
      await request(h.nc, Orch.agentCancel, { actor: operator, session_id: session.id });
      expect(await get(bundle.id)).toMatchObject({ status: 'pending', detached: true, detached_reason: 'turn_cancelled' });
    });

    it("an operator's task stop detaches the pending bundle", async () => {
      const { task, session } = await working();
      const { bundle } = await ask(task.id, session.id);
      await request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id });
      expect(await get(bundle.id)).toMatchObject({ status: 'pending', detached: true, detached_reason: 'stopped_by_operator' });
      expect(await respond(bundle.id, { rejected: true })).toMatchObject({ status: 'rejected', agent_resumed: false });
    });

    it("a parent's MCP stop of the child detaches the child's bundle", async () => {
      const ws = await h.workspace();
      const parent = await h.task(ws.id, 'parent');
      const child = await h.task(ws.id, 'child', parent.id);
      const s = await h.startSession(child.id, 'work');
      const { bundle } = await ask(child.id, s.id);
      expect(await h.stopChild(parent.id, child.id)).toMatchObject({ status: 'stopped' });
      expect(await get(bundle.id)).toMatchObject({ detached: true, detached_reason: 'stopped_by_parent_task' });
    });
  });

  describe('superseded bundles (R-5.4)', () => {
    it("a bundle of an older turn is never active and a late answer to it resumes nothing; the new turn's bundle is unaffected", async () => {
      const { ws, task, session } = await working();
      const old = await ask(task.id, session.id);
      // The turn ends without the agent's call returning (e.g. its client gave up), then newer work is accepted.
      const e = [...h.life.registry.values()].find((x) => x.session_id === session.id)!;
      const turn = e.turn_id!;
      e.status = 'READY';
      e.turn_id = null;
      await new EventPublisher(h.nc).emit(
        'turn.completed',
        { workspace_id: ws.id, task_id: task.id, session_id: session.id },
        { execution_id: e.execution_id, turn_id: turn, stop_reason: 'end_turn' },
      );
      await until('turn completed', async () =>
        (await request(h.nc, Orch.sessionGet, { actor: operator, session_id: session.id })).turns[0]!.completed_at ? true : undefined,
      );
      await request(h.nc, Orch.sessionPrompt, { actor: operator, session_id: session.id, prompt: 'newer work' });

      expect(await get(old.bundle.id)).toMatchObject({ status: 'pending', superseded: true, active: false, waiter_live: false, detached_reason: 'superseded' });
      expect((await request(h.nc, OrchClarification.ofTask, { actor: operator, task_id: task.id })).active).toBeNull();

      const fresh = await ask(task.id, session.id);
      expect(fresh.bundle).toMatchObject({ active: true, superseded: false });
      expect((await request(h.nc, OrchClarification.ofTask, { actor: operator, task_id: task.id })).active?.id).toBe(fresh.bundle.id);

      const late = await respond(old.bundle.id, {
        answers: [
          { question_id: 'a', answer: 'late' },
          { question_id: 'b', answer: 'late' },
        ],
      });
      expect(late).toMatchObject({ status: 'answered', agent_resumed: false, detached: true, detached_reason: 'superseded' });
      expect((await renew(task.id, old.bundle.id)).bundle.detached).toBe(true);
      expect(await get(fresh.bundle.id)).toMatchObject({ status: 'pending', waiter_live: true, active: true });
    });
  });

  it('keeps other workspaces out', async () => {
    const { task, session } = await working();
    const { bundle } = await ask(task.id, session.id);
    const outsider: OperatorActor = { type: 'operator', id: 'op-2', workspaces: ['00000000-0000-4000-8000-000000000001'] };
    await expect(request(h.nc, OrchClarification.get, { actor: outsider, bundle_id: bundle.id })).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await expect(respond(bundle.id, { rejected: true }, outsider)).rejects.toMatchObject({ code: 'FORBIDDEN' });
    expect((await get(bundle.id)).status).toBe('pending');
  });
});
