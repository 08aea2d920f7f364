import { afterAll, beforeAll, expect, it } from 'vitest';
import { Orch } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { operator, startHarness, type Harness } from './harness.js';

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
