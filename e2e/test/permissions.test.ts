import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, WsClient } from '@kandev/testkit';
import { AGENTS, makeTask, sharedWorld, type SharedWorld } from './support.js';

/**
 * end to end, for both protocols: the scripted agent asks permission (ACP
 * `session/request_permission`, Codex `item/commandExecution/requestApproval`) → agentctl →
 * lifecycle event → orchestrator row → GET /tasks/:id/permissions and the `permission.requested`
 * notification; the operator's answer goes back through the gateway, the orchestrator and the
 * owning lifecycle to agentctl and the waiting agent. A turn cancel answers a pending one
 * `cancelled`, and an answer after that is CONFLICT.
 */
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

const permissionScript = (text: string) => JSON.stringify({ script: [{ permission: text }] });

describe.each(AGENTS)('permission requests of %s', (agent) => {
  it('reach the operator, who answers them; a turn cancel answers one cancelled and a late answer is CONFLICT', async () => {
    const { task } = await makeTask(w.api, { agent });
    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      expect((await ws.request('subscribe', { task_id: task.id })).type).toBe('response');
      const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: permissionScript('run ls?') });

      const pending = await eventually(async () => {
        const list = (await w.api.get(`/tasks/${task.id}/permissions`)).body as Array<Record<string, any>>;
        return list.length === 1 ? list[0]! : null;
      }, 20_000);
      expect(pending).toMatchObject({ session_id: session.id, title: 'run ls?', status: 'pending', chosen_option_id: null, closed_at: null });
      expect(typeof pending.id).toBe('string');
      expect(typeof pending.turn_id).toBe('string');
      expect(typeof pending.created_at).toBe('string');
      for (const o of pending.options) expect(Object.keys(o).sort()).toEqual(['kind', 'name', 'option_id']);
      const note = await ws.waitFor((f) => f.action === 'permission.requested' && f.payload.id === pending.id);
      expect(note.payload).toMatchObject({ task_id: task.id, session_id: session.id, status: 'pending', title: 'run ls?' });
      // The operator reads it in the session's transcript too, where the agent asked it.
      const asked = await eventually(
        async () =>
          ((await w.api.get(`/sessions/${session.id}/messages`)).body.items as Array<Record<string, unknown>>).find((m) => m.kind === 'permission_request'),
        20_000,
      );
      expect(asked).toMatchObject({ role: 'agent', text: 'run ls?', turn_id: pending.turn_id });

      const allow = pending.options.find((o: { kind: string }) => o.kind === 'allow_once');
      const answered = await w.api.post(`/permissions/${pending.id}/respond`, { option_id: allow.option_id });
      expect(answered.status).toBe(200);
      expect(answered.body).toMatchObject({ id: pending.id, status: 'answered', chosen_option_id: allow.option_id });
      expect(answered.body.closed_at).not.toBeNull();
      await ws.waitFor((f) => f.action === 'permission.closed' && f.payload.id === pending.id && f.payload.status === 'answered');

      // The agent got the answer and carried on: its turn ends normally and it says what it was given.
      const done = await eventually(async () => {
        const s = (await w.api.get(`/sessions/${session.id}`)).body;
        return s.turns[0]?.completed_at ? s : null;
      }, 20_000);
      expect(done.turns[0].stop_reason).toBe('end_turn');
      const pid = done.execution.pid as number;
      const outcome = await eventually(async () => w.agentEvents(pid).find((e) => e.kind === 'permission_outcome'));
      expect(outcome).toMatchObject({ outcome: allow.option_id, normalized: 'allowed' });
      expect((await w.api.get(`/tasks/${task.id}/permissions`)).body[0]).toMatchObject({
        id: pending.id,
        status: 'answered',
        chosen_option_id: allow.option_id,
      });

      // A second request, ended by a turn cancel: the row is closed cancelled, an answer after it is CONFLICT.
      expect((await w.api.post(`/sessions/${session.id}/prompt`, { prompt: permissionScript('push?') })).status).toBe(202);
      const second = await eventually(async () => {
        const list = (await w.api.get(`/tasks/${task.id}/permissions`)).body as Array<Record<string, any>>;
        return list.find((p) => p.title === 'push?') ?? null;
      }, 20_000);
      expect(second.status).toBe('pending');
      expect((await w.api.post(`/sessions/${session.id}/cancel`)).status).toBe(200);
      const cancelled = await eventually(async () => {
        const list = (await w.api.get(`/tasks/${task.id}/permissions`)).body as Array<Record<string, any>>;
        return list.find((p) => p.id === second.id && p.status === 'cancelled') ?? null;
      }, 20_000);
      expect(cancelled).toMatchObject({ chosen_option_id: null });
      expect(cancelled.closed_at).not.toBeNull();
      await ws.waitFor((f) => f.action === 'permission.closed' && f.payload.id === second.id && f.payload.status === 'cancelled');
      const late = await w.api.post(`/permissions/${second.id}/respond`, { option_id: allow.option_id });
      expect(late.status).toBe(409);
      expect(late.body.error.code).toBe('CONFLICT');
      const agentSaw = await eventually(async () => w.agentEvents(pid).filter((e) => e.kind === 'permission_outcome')[1]);
      expect(agentSaw).toMatchObject({ normalized: 'cancelled' });

      // Pending first, then newest first; both closed now, so the newest leads.
      expect(((await w.api.get(`/tasks/${task.id}/permissions`)).body as Array<{ id: string }>).map((p) => p.id)).toEqual([second.id, pending.id]);
      // Both answers are audited with the operator and the request id.
      const audit = (await w.api.get(`/tasks/${task.id}/audit`)).body as Array<Record<string, any>>;
      expect(audit.find((a) => a.action === 'permission.answer' && a.outcome === 'answered')).toMatchObject({ actor: expect.stringMatching(/^operator:/) });
      expect(audit.some((a) => a.action === 'permission.answer' && a.outcome === 'error:CONFLICT')).toBe(true);
    } finally {
      ws.close();
    }
  });

  it('refuses an option the agent did not offer, and a bad body, without answering the agent', async () => {
    const { task } = await makeTask(w.api, { agent });
    await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: permissionScript('rm -rf build?') });
    const pending = await eventually(async () => (await w.api.get(`/tasks/${task.id}/permissions`)).body[0] as Record<string, any> | undefined, 20_000);
    const bad = await w.api.post(`/permissions/${pending.id}/respond`, { option_id: 'not-offered' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('VALIDATION_ERROR');
    const both = await w.api.post(`/permissions/${pending.id}/respond`, { option_id: pending.options[0].option_id, cancelled: true });
    expect(both.body.error.code).toBe('VALIDATION_ERROR');
    expect((await w.api.get(`/tasks/${task.id}/permissions`)).body[0]).toMatchObject({ id: pending.id, status: 'pending' });
    const res = await w.api.post(`/permissions/${pending.id}/respond`, { cancelled: true });
    expect(res.body).toMatchObject({ status: 'cancelled', chosen_option_id: null });
  });
});
