import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Orch, OrchMcp } from '@kandev/contracts';
import { EventPublisher, request } from '@kandev/runtime';
import { eventually } from '@kandev/testkit';
import { agentToken, operator, startHarness, type Harness } from './harness.js';

/**
 * B-3: control actions beyond stops and holds are audited in the same transaction as their effect:
 * an operator's PATCH of status or archive, a session start, a prompt, and a launch the fence refused.
 */
let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => h?.stop());

const audit = (task_id: string) => request(h.nc, Orch.taskAudit, { actor: operator, task_id });

it('audits a session start, a prompt, and an operator moving and archiving the card', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 'audited');
  const s = await h.startSession(task.id);
  expect((await audit(task.id))[0]).toMatchObject({ action: 'session.start', actor: 'operator:op-1', outcome: 'started', details: { session_id: s.id } });
  const { turn_id } = await request(h.nc, Orch.sessionPrompt, { actor: operator, session_id: s.id, prompt: 'go' }, { requestId: 'req-prompt-1' });
  expect((await audit(task.id))[0]).toMatchObject({
    action: 'session.prompt',
    request_id: 'req-prompt-1',
    outcome: 'sent',
    details: { session_id: s.id, turn_id },
  });
  await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: task.id, status: 'BLOCKED' });
  expect((await audit(task.id))[0]).toMatchObject({ action: 'task.update', outcome: 'updated', details: { from: 'IN_PROGRESS', to: 'BLOCKED' } });
  await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: task.id, archived: true });
  expect((await audit(task.id))[0]).toMatchObject({ action: 'task.update', details: { archived: true } });
  // A title edit is not a control action.
  const before = (await audit(task.id)).length;
  await request(h.nc, Orch.taskUpdate, { actor: operator, task_id: task.id, title: 'renamed' });
  expect(await audit(task.id)).toHaveLength(before);
});

it('audits a launch refused by the fence, with both epochs', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 'fenced');
  const s = await h.startSession(task.id);
  const [row] = await h.sql`SELECT fence_epoch::int AS e FROM orchestrator.tasks WHERE id = ${task.id}`;
  const verdict = await request(h.nc, Orch.executionAdmit, {
    execution_id: '00000000-0000-4000-8000-000000000001',
    task_id: task.id,
    session_id: s.id,
    fence_epoch: row!.e + 7,
    instance_id: 'life-x',
  });
  expect(verdict.admitted).toBe(false);
  expect((await audit(task.id))[0]).toMatchObject({
    action: 'execution.admit',
    outcome: 'refused',
    actor: 'system:lifecycle:life-x',
    details: { fence_epoch: row!.e + 7, current_epoch: row!.e },
  });
});

/**
 * A message interrupt is audited in the transaction that stores the message (outcome `queued`),
 * and its delivery settles that row in the delivery's own transaction (`sent`): the row exists
 * exactly when the message was stored, and says `sent` exactly when the delivery committed.
 */
describe('message interrupt audit', () => {
  const family = async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    return { parent, child };
  };
  const interruptRows = (taskId: string) =>
    h.sql<{ outcome: string; request_id: string; details: Record<string, string>; created_at: Date }[]>`
      SELECT outcome, request_id, details, created_at FROM orchestrator.audit_log WHERE task_id = ${taskId} AND action = 'mcp.message_task.interrupt'`;
  // A failing audit write, installed for one test: the action must fail with it.
  const failAudit = async (op: 'INSERT' | 'UPDATE', body: () => Promise<void>) => {
    await h.sql.unsafe(`CREATE FUNCTION orchestrator.fail_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit refused'; END $$`);
    await h.sql.unsafe(
      `CREATE TRIGGER fail_audit BEFORE ${op} ON orchestrator.audit_log FOR EACH ROW WHEN (NEW.action = 'mcp.message_task.interrupt') EXECUTE FUNCTION orchestrator.fail_audit()`,
    );
    try {
      await body();
    } finally {
      await h.sql.unsafe(`DROP TRIGGER fail_audit ON orchestrator.audit_log; DROP FUNCTION orchestrator.fail_audit()`);
    }
  };

  it('a delivered interrupt has one row, sent, naming the cancelled and the new turn', async () => {
    const { parent, child } = await family();
    const s = await h.startSession(child.id, 'wrong approach');
    const before = (await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id })).turns[0]!.id;
    const res = await request(
      h.nc,
      OrchMcp.messageTask,
      { caller_task_id: parent.id, agent_token: await agentToken(parent.id), task_id: child.id, prompt: 'change course', delivery_mode: 'interrupt' },
      { requestId: 'req-int-1' },
    );
    expect(res.status).toBe('sent');
    const turns = (await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id })).turns;
    const rows = await interruptRows(child.id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      outcome: 'sent',
      request_id: 'req-int-1',
      details: { session_id: s.id, cancelled_turn_id: before, turn_id: turns[1]!.id },
    });
  });

  it('an interrupt that stays queued is audited in the transaction that stored the message', async () => {
    const { parent, child } = await family();
    await h.startSession(child.id, 'stubborn');
    h.life.cancelBehaviour = 'timeout';
    try {
      expect((await h.message(parent.id, child.id, 'stop that', 'interrupt')).status).toBe('queued');
    } finally {
      h.life.cancelBehaviour = 'cancel';
    }
    const [row] = await interruptRows(child.id);
    const [msg] = await h.sql<{ queued_at: Date }[]>`SELECT queued_at FROM orchestrator.queued_messages WHERE task_id = ${child.id}`;
    expect(row).toMatchObject({ outcome: 'queued' });
    // now() is the transaction's start: equal timestamps mean one transaction.
    expect(row!.created_at.getTime()).toBe(msg!.queued_at.getTime());
  });

  it('an audit row that cannot be written stores no message: the caller gets an error', async () => {
    const { parent, child } = await family();
    await h.startSession(child.id, 'work');
    const cancels = h.life.cancels.length;
    await failAudit('INSERT', async () => {
      await expect(h.message(parent.id, child.id, 'unaudited', 'interrupt')).rejects.toMatchObject({ code: 'INTERNAL_ERROR' });
    });
    expect(await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id })).toEqual([]);
    expect(h.life.cancels.length).toBe(cancels);
  });

  it('an outcome that cannot be settled undoes the delivery: the message stays queued and the row says queued', async () => {
    const { parent, child } = await family();
    const s = await h.startSession(child.id, 'work');
    await failAudit('UPDATE', async () => {
      expect((await h.message(parent.id, child.id, 'settle me', 'interrupt')).status).toBe('queued');
    });
    expect((await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id })).map((m) => m.prompt)).toEqual(['settle me']);
    expect((await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id })).turns).toHaveLength(1);
    expect((await interruptRows(child.id))[0]).toMatchObject({ outcome: 'queued' });
  });
});

it('a turn the agent runtime reports cancelled, with no cancel of ours recorded, is audited when the report closes it', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 'cancelled elsewhere');
  const s = await h.startSession(task.id, 'work');
  const e = [...h.life.registry.values()].find((x) => x.session_id === s.id)!;
  const turn = e.turn_id!;
  e.status = 'READY';
  e.turn_id = null;
  const report = () =>
    new EventPublisher(h.nc).emit(
      'turn.completed',
      { workspace_id: ws.id, task_id: task.id, session_id: s.id },
      { execution_id: e.execution_id, turn_id: turn, stop_reason: 'cancelled' },
    );
  const rows = () =>
    h.sql<
      { details: Record<string, string>; created_at: Date }[]
    >`SELECT details, created_at FROM orchestrator.audit_log WHERE task_id = ${task.id} AND action = 'turn.cancelled'`;
  await report();
  await eventually(async () => (await rows()).length === 1);
  const [t] = await h.sql<{ completed_at: Date }[]>`SELECT completed_at FROM orchestrator.turns WHERE id = ${turn}`;
  const [row] = await rows();
  expect(row!.details).toMatchObject({ session_id: s.id, turn_id: turn });
  expect(row!.created_at.getTime()).toBe(t!.completed_at.getTime());

  // A turn our own cancel closed is the cancel's row: its later report adds nothing.
  const { turn_id: second } = await request(h.nc, Orch.sessionPrompt, { actor: operator, session_id: s.id, prompt: 'again' });
  await request(h.nc, Orch.agentCancel, { actor: operator, session_id: s.id });
  await new EventPublisher(h.nc).emit(
    'turn.completed',
    { workspace_id: ws.id, task_id: task.id, session_id: s.id },
    { execution_id: e.execution_id, turn_id: second, stop_reason: 'cancelled' },
  );
  // Applied once it is in the consumer's inbox (both reports are).
  await eventually(async () => (await h.sql`SELECT 1 FROM orchestrator.inbox WHERE consumer = 'orchestrator-lifecycle'`).length >= 2);
  expect(await rows()).toHaveLength(1);
});
