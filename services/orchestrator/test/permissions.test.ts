import { randomUUID } from 'node:crypto';
import { jetstream } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventSubject, isKandevError, Orch, OrchPermission, type OperatorActor, type PermissionRequest } from '@kandev/contracts';
import { EventPublisher, request } from '@kandev/runtime';
import { eventually } from '@kandev/testkit';
import { FakeAgentPermissions } from './fake-permissions.js';
import { operator, startHarness, type Harness } from './harness.js';

/** at the orchestrator: rows from the lifecycle's events (once, B-5), the operator's answer, and its race with a turn cancel. */
describe('permission requests', () => {
  let h: Harness;
  let agent: FakeAgentPermissions;
  beforeAll(async () => {
    h = await startHarness();
    agent = new FakeAgentPermissions(h.nc);
    await agent.start();
    h.life.onCancel = (req) => agent.cancelAll(req.execution_id);
  });
  afterAll(async () => h?.stop());

  const list = (task_id: string, actor: OperatorActor = operator) => request(h.nc, OrchPermission.ofTask, { actor, task_id });
  const respond = (id: string, answer: { option_id: string } | { cancelled: true }, actor: OperatorActor = operator) =>
    request(h.nc, OrchPermission.respond, { actor, permission_request_id: id, ...answer });
  const failure = (p: Promise<unknown>) =>
    p.then(
      () => null,
      (e: unknown) => (isKandevError(e) ? e : Promise.reject(e)),
    );

  /** A task with a running session on the fake lifecycle, and the scope its events carry. */
  async function running() {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'work');
    const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
    return { ws, task, s, e, scope: { workspace_id: ws.id, task_id: task.id, session_id: s.id } };
  }

  /** The task's row for agentctl's request id, once the consumer has recorded it. */
  const rowFor = (task_id: string, permission_id: string, where: (p: PermissionRequest) => boolean = () => true) =>
    eventually(async () => (await list(task_id)).find((p) => p.permission_id === permission_id && where(p)) ?? null, 10_000, 10);

  it('records a request once however often its event is delivered, and publishes permission.requested once', async () => {
    const { task, e, scope } = await running();
    const { permission_id, event } = await agent.ask(scope, e.execution_id, e.turn_id);
    const row = await rowFor(task.id, permission_id);
    expect(row).toMatchObject({
      task_id: task.id,
      session_id: scope.session_id,
      execution_id: e.execution_id,
      turn_id: e.turn_id,
      title: 'run ls?',
      status: 'pending',
      chosen_option_id: null,
      closed_at: null,
    });
    expect(row.options).toEqual([
      { option_id: 'allow', name: 'Allow', kind: 'allow_once' },
      { option_id: 'reject', name: 'Reject', kind: 'reject_once' },
    ]);
    // Delivered again as is (same event id, a new stream message past JetStream's dedupe: the inbox
    // keeps it out), and re-sent as a new event (same agentctl id: the unique key keeps it out).
    await jetstream(h.nc).publish(eventSubject(event.type), JSON.stringify(event), { msgID: randomUUID() });
    await new EventPublisher(h.nc).emit('agent.permission_requested', scope, event.data);
    const marker = await agent.ask(scope, e.execution_id, e.turn_id, 'marker'); // consumed after the copies
    await rowFor(task.id, marker.permission_id);
    expect((await list(task.id)).filter((p) => p.permission_id === permission_id)).toHaveLength(1);
    const staged =
      await h.sql`SELECT 1 FROM orchestrator.outbox WHERE payload->>'type' = 'permission.requested' AND payload->'data'->>'permission_id' = ${permission_id}`;
    expect(staged).toHaveLength(1);
    const [ev] = await h.sql<
      { payload: { data: Record<string, unknown> } }[]
    >`SELECT payload FROM orchestrator.outbox WHERE payload->>'type' = 'permission.requested' AND payload->'data'->>'permission_id' = ${permission_id}`;
    const { permission: nested, ...flat } = ev!.payload.data;
    expect(flat).toEqual(row);
    expect(nested).toEqual(row);
  });

  it('answers with an option: the agent gets it, the row is answered and audited; a second answer is CONFLICT', async () => {
    const { task, e, scope } = await running();
    const { permission_id } = await agent.ask(scope, e.execution_id, e.turn_id);
    const row = await rowFor(task.id, permission_id);
    const answered = await respond(row.id, { option_id: 'allow' });
    expect(answered).toMatchObject({ id: row.id, status: 'answered', chosen_option_id: 'allow', closed_by: 'operator:op-1' });
    expect(answered.closed_at).not.toBeNull();
    expect(agent.requests.get(permission_id)!.settled).toEqual({ outcome: 'allowed', option_id: 'allow' });

    const again = await failure(respond(row.id, { option_id: 'reject' }));
    expect(again?.code).toBe('CONFLICT');
    const cancelled = await failure(respond(row.id, { cancelled: true }));
    expect(cancelled?.code).toBe('CONFLICT');
    expect((await list(task.id)).find((p) => p.id === row.id)).toEqual(answered);

    const audit = await request(h.nc, Orch.taskAudit, { actor: operator, task_id: task.id });
    const mine = audit.filter((a) => a.details.permission_request_id === row.id);
    expect(mine.map((a) => [a.action, a.outcome])).toEqual(
      expect.arrayContaining([
        ['permission.answer', 'answered'],
        ['permission.answer', 'error:CONFLICT'],
        ['permission.cancel', 'error:CONFLICT'],
      ]),
    );
    const ok = mine.find((a) => a.outcome === 'answered')!;
    expect(ok.actor).toBe('operator:op-1');
    expect(ok.request_id).toBeTruthy();
  });

  it('refuses an option the agent did not offer (VALIDATION_ERROR) and changes nothing; an operator may cancel the request', async () => {
    const { task, e, scope } = await running();
    const { permission_id } = await agent.ask(scope, e.execution_id, e.turn_id);
    const row = await rowFor(task.id, permission_id);
    const sent = agent.answers.length;
    const bad = await failure(respond(row.id, { option_id: 'sudo' }));
    expect(bad?.code).toBe('VALIDATION_ERROR');
    expect(agent.answers.length).toBe(sent);
    expect((await list(task.id)).find((p) => p.id === row.id)?.status).toBe('pending');
    const closed = await respond(row.id, { cancelled: true });
    expect(closed).toMatchObject({ status: 'cancelled', chosen_option_id: null, closed_by: 'operator:op-1' });
    expect(agent.requests.get(permission_id)!.settled).toEqual({ outcome: 'cancelled', option_id: null });
  });

  it('lists pending requests first, then newest first', async () => {
    const { task, e, scope } = await running();
    const a = await agent.ask(scope, e.execution_id, e.turn_id, 'a');
    const b = await agent.ask(scope, e.execution_id, e.turn_id, 'b');
    const c = await agent.ask(scope, e.execution_id, e.turn_id, 'c');
    await rowFor(task.id, c.permission_id);
    const rowB = await rowFor(task.id, b.permission_id);
    await rowFor(task.id, a.permission_id);
    await respond(rowB.id, { option_id: 'reject' });
    expect((await list(task.id)).map((p) => p.title)).toEqual(['c', 'a', 'b']);
  });

  it('refuses another workspace (FORBIDDEN) for the list and the answer, and changes nothing', async () => {
    const { task, e, scope } = await running();
    const { permission_id } = await agent.ask(scope, e.execution_id, e.turn_id);
    const row = await rowFor(task.id, permission_id);
    const other = await h.workspace('other');
    const outsider: OperatorActor = { type: 'operator', id: 'op-2', workspaces: [other.id] };
    expect((await failure(list(task.id, outsider)))?.code).toBe('FORBIDDEN');
    expect((await failure(respond(row.id, { option_id: 'allow' }, outsider)))?.code).toBe('FORBIDDEN');
    expect(agent.requests.get(permission_id)!.settled).toBeNull();
    expect((await list(task.id)).find((p) => p.id === row.id)?.status).toBe('pending');
    expect((await failure(respond('00000000-0000-4000-8000-000000000000', { option_id: 'allow' })))?.code).toBe('NOT_FOUND');
  });

  it('an answer racing a turn cancel: exactly one wins every time, and the row says what the agent got', async () => {
    const { task, s, e, scope } = await running();
    const wins = { answer: 0, cancel: 0 };
    for (let i = 0; i < 20; i++) {
      if (i > 0) await request(h.nc, Orch.sessionPrompt, { actor: operator, session_id: s.id, prompt: `turn ${i}` });
      const turnId = h.life.registry.get(e.execution_id)!.turn_id;
      const { permission_id } = await agent.ask(scope, e.execution_id, turnId);
      const row = await rowFor(task.id, permission_id);
      const [answer, cancel] = await Promise.allSettled([
        respond(row.id, { option_id: 'allow' }),
        request(h.nc, Orch.agentCancel, { actor: operator, session_id: s.id }),
      ]);
      expect(cancel.status).toBe('fulfilled');
      const settled = agent.requests.get(permission_id)!.settled!;
      const closed = await rowFor(task.id, permission_id, (p) => p.status !== 'pending');
      if (answer.status === 'fulfilled') {
        wins.answer++;
        expect(settled).toEqual({ outcome: 'allowed', option_id: 'allow' });
        expect(answer.value).toEqual(closed);
        expect(closed).toMatchObject({ status: 'answered', chosen_option_id: 'allow', closed_by: 'operator:op-1' });
      } else {
        wins.cancel++;
        expect(isKandevError(answer.reason) && answer.reason.code).toBe('CONFLICT');
        expect(settled).toEqual({ outcome: 'cancelled', option_id: null });
        expect(closed).toMatchObject({ status: 'cancelled', chosen_option_id: null, closed_by: 'system:agent' });
      }
    }
    expect(wins.answer + wins.cancel).toBe(20);
    // Every request's closure is audited exactly once: by the answer that closed it (answered, or the
    // agent's `conflict:already_cancelled`), or by the cancel's report (`permission.closed`); a
    // refused answer that closed nothing is audited as an error besides.
    const audit = await request(h.nc, Orch.taskAudit, { actor: operator, task_id: task.id });
    const closures = audit.filter((a) => a.action.startsWith('permission.') && !a.outcome.startsWith('error:'));
    expect(closures).toHaveLength(20);
    expect(new Set(closures.map((a) => a.details.permission_request_id)).size).toBe(20);
  });

  it('an answer that meets a request agentctl already cancelled (its report not yet consumed) is CONFLICT, and the row says cancelled', async () => {
    const { task, e, scope } = await running();
    const { permission_id } = await agent.ask(scope, e.execution_id, e.turn_id);
    const row = await rowFor(task.id, permission_id);
    // A turn cancel reached agentctl first; the lifecycle's report of it is still on its way.
    agent.requests.get(permission_id)!.settled = { outcome: 'cancelled', option_id: null };
    const res = await failure(respond(row.id, { option_id: 'allow' }));
    expect(res?.code).toBe('CONFLICT');
    expect(res?.details).toMatchObject({ status: 'cancelled', closed_by: 'system:agent' });
    expect((await list(task.id)).find((p) => p.id === row.id)).toMatchObject({ status: 'cancelled', chosen_option_id: null, closed_by: 'system:agent' });
    const audit = await request(h.nc, Orch.taskAudit, { actor: operator, task_id: task.id });
    expect(audit.filter((a) => a.details.permission_request_id === row.id).map((a) => [a.action, a.outcome, a.actor])).toEqual([
      ['permission.answer', 'conflict:already_cancelled', 'operator:op-1'],
    ]);
  });

  it('a stopped execution cancels what it still had pending, and an answer after that is CONFLICT', async () => {
    const { task, e, scope } = await running();
    const { permission_id } = await agent.ask(scope, e.execution_id, e.turn_id);
    const row = await rowFor(task.id, permission_id);
    await new EventPublisher(h.nc).emit('execution.stopped', scope, {
      execution_id: e.execution_id,
      how: 'killed',
      grace_ms: 0,
      reason: 'test',
      pid: null,
      exit_code: null,
      signal: 'SIGKILL',
    });
    const closed = await rowFor(task.id, permission_id, (p) => p.status !== 'pending');
    expect(closed).toMatchObject({ id: row.id, status: 'cancelled', closed_by: 'system:execution_stopped' });
    expect((await failure(respond(row.id, { option_id: 'allow' })))?.code).toBe('CONFLICT');
    const audit = await request(h.nc, Orch.taskAudit, { actor: operator, task_id: task.id });
    expect(audit.find((a) => a.action === 'permission.closed' && a.details.permission_request_id === row.id)).toMatchObject({
      actor: 'system:lifecycle',
      outcome: 'cancelled',
    });
  });

  it('a resolution that arrives before its request records the row closed; the late request adds nothing', async () => {
    const { task, e, scope } = await running();
    const pub = new EventPublisher(h.nc);
    const permission_id = 'resolved-first';
    const asked = { title: 'late', options: [{ option_id: 'allow', name: 'Allow', kind: 'allow_once' }] };
    await pub.emit('agent.permission_resolved', scope, {
      execution_id: e.execution_id,
      permission_id,
      turn_id: null,
      outcome: 'cancelled',
      option_id: null,
      asked,
    });
    await rowFor(task.id, permission_id);
    await pub.emit('agent.permission_requested', scope, { execution_id: e.execution_id, permission_id, turn_id: null, ...asked });
    const marker = await agent.ask(scope, e.execution_id, null, 'marker');
    await rowFor(task.id, marker.permission_id);
    const rows = (await list(task.id)).filter((p) => p.permission_id === permission_id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: 'cancelled', title: 'late', closed_by: 'system:agent' });
  });

  it('an answer whose agent is gone closes the request cancelled and says CONFLICT', async () => {
    const { task, e, scope } = await running();
    const { permission_id } = await agent.ask(scope, e.execution_id, e.turn_id);
    const row = await rowFor(task.id, permission_id);
    agent.requests.delete(permission_id); // agentctl no longer knows it (its agent was replaced)
    const res = await failure(respond(row.id, { option_id: 'allow' }));
    expect(res?.code).toBe('CONFLICT');
    expect((await list(task.id)).find((p) => p.id === row.id)).toMatchObject({ status: 'cancelled', closed_by: 'system:agent' });
  });
});
