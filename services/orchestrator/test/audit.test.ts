import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Orch, OrchMcp } from '@kandev/contracts';
import { request } from '@kandev/runtime';
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
  expect((await audit(task.id))[0]).toMatchObject({ action: 'session.prompt', request_id: 'req-prompt-1', outcome: 'sent', details: { session_id: s.id, turn_id } });
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
  const verdict = await request(h.nc, Orch.executionAdmit, { execution_id: '00000000-0000-4000-8000-000000000001', task_id: task.id, session_id: s.id, fence_epoch: row!.e + 7, instance_id: 'life-x' });
  expect(verdict.admitted).toBe(false);
  expect((await audit(task.id))[0]).toMatchObject({ action: 'execution.admit', outcome: 'refused', actor: 'system:lifecycle:life-x', details: { fence_epoch: row!.e + 7, current_epoch: row!.e } });
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
    await h.sql.unsafe(`CREATE TRIGGER fail_audit BEFORE ${op} ON orchestrator.audit_log FOR EACH ROW WHEN (NEW.action = 'mcp.message_task.interrupt') EXECUTE FUNCTION orchestrator.fail_audit()`);
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
    const res = await request(h.nc, OrchMcp.messageTask, { caller_task_id: parent.id, agent_token: await agentToken(parent.id), task_id: child.id, prompt: 'change course', delivery_mode: 'interrupt' }, { requestId: 'req-int-1' });
    expect(res.status).toBe('sent');
    const turns = (await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id })).turns;
    const rows = await interruptRows(child.id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ outcome: 'sent', request_id: 'req-int-1', details: { session_id: s.id, cancelled_turn_id: before, turn_id: turns[1]!.id } });
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
