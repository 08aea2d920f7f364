import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, processAlive, WsClient } from '@kandev/testkit';
import { AGENTS, makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * R-3 end to end, for both protocols: gateway /ws → orchestrator → lifecycle → agentctl →
 * adapter → the scripted agent speaking real ACP / Codex app-server JSON-RPC over stdio.
 */
let w: World;
beforeAll(async () => {
  w = await startWorld({ CANCEL_TIMEOUT_MS: '700' });
});
afterAll(async () => w?.stop());

describe.each(AGENTS)('turn cancel with %s', (agent) => {
  it('cancels a sleeping turn over /ws without killing the agent, then takes a new prompt', async () => {
    const { task } = await makeTask(w.api, { agent });
    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      expect((await ws.request('subscribe', { task_id: task.id })).type).toBe('response');
      const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(30_000) });
      const running = await eventually(async () => {
        const s = (await w.api.get(`/sessions/${session.id}`)).body;
        return s.execution?.status === 'RUNNING' ? s : null;
      });
      const pid = running.execution.pid as number;
      const res = await ws.request('agent.cancel', { session_id: session.id });
      expect(res).toMatchObject({ type: 'response', action: 'agent.cancel', payload: { success: true, session_id: session.id } });
      const note = await ws.waitFor((f) => f.action === 'session.agent.cancelled' && f.payload.session_id === session.id);
      expect(note.payload.task_id).toBe(task.id);
      const after = (await w.api.get(`/sessions/${session.id}`)).body;
      expect(after.state).toBe('WAITING_FOR_INPUT');
      expect(after.execution).toMatchObject({ status: 'READY', pid });
      expect(after.turns[0].stop_reason).toBe('cancelled');
      expect(processAlive(pid)).toBe(true);
      // The agent really received the protocol's cancel.
      const methods = w
        .agentEvents(pid)
        .filter((e) => e.kind === 'recv')
        .map((e) => e.method);
      expect(methods).toContain(agent === 'scripted-acp' ? 'session/cancel' : 'turn/interrupt');
      // And it accepts a new prompt, which completes.
      const prompt = await w.api.post(`/sessions/${session.id}/prompt`, { prompt: 'hello again' });
      expect(prompt.status).toBe(202);
      const done = await eventually(async () => {
        const s = (await w.api.get(`/sessions/${session.id}`)).body;
        return s.turns.length === 2 && s.turns[1].completed_at ? s : null;
      });
      expect(done.turns[1].stop_reason).toBe('end_turn');
      expect(done.state).toBe('WAITING_FOR_INPUT');
    } finally {
      ws.close();
    }
  });

  it('treats a cancel with no turn in flight as a successful no-op', async () => {
    const { task } = await makeTask(w.api, { agent });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, {});
    const before = (await w.api.get(`/sessions/${session.id}`)).body;
    expect(before.state).toBe('WAITING_FOR_INPUT');
    const res = await w.api.post(`/sessions/${session.id}/cancel`);
    expect(res).toEqual({ status: 200, body: { success: true, session_id: session.id } });
    expect((await w.api.get(`/sessions/${session.id}`)).body).toEqual(before);
  });

  it('answers a pending permission request with the cancelled outcome', async () => {
    const { task } = await makeTask(w.api, { agent });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, {
      prompt: JSON.stringify({ script: [{ permission: 'rm -rf build?' }, { say: 'after' }] }),
    });
    const pid = await eventually(async () => {
      const s = (await w.api.get(`/sessions/${session.id}`)).body;
      const p = s.execution?.pid as number | undefined;
      return p && w.agentEvents(p).some((e) => e.kind === 'permission_requested') ? p : null;
    });
    expect((await w.api.post(`/sessions/${session.id}/cancel`)).status).toBe(200);
    const outcome = await eventually(async () => w.agentEvents(pid).find((e) => e.kind === 'permission_outcome'));
    expect(JSON.stringify(outcome)).toMatch(/cancel/);
  });

  it('reports an agent that ignores the cancel as an error and does not leave the session wedged', async () => {
    const { task } = await makeTask(w.api, { agent });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000, { ignore_cancel: true }) });
    const pid = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.pid as number | undefined);
    const t0 = Date.now();
    const res = await w.api.post(`/sessions/${session.id}/cancel`);
    // the answer names the escalation it started (not a 503 that invites a retry).
    expect(res.status).toBe(409);
    expect(res.body.error).toMatchObject({ code: 'CONFLICT', details: { escalation: 'teardown', session_state: 'CANCELLED' } });
    expect(res.body.error.message).toMatch(/acknowledge/);
    expect(Date.now() - t0).toBeLessThan(5_000);
    // Escalation: the execution is torn down and the session is CANCELLED as by a stop.
    await eventually(async () => !processAlive(pid), 10_000);
    const s = await eventually(async () => {
      const b = (await w.api.get(`/sessions/${session.id}`)).body;
      return b.execution === null ? b : null;
    });
    expect(s.state).toBe('CANCELLED');
  });
});

describe('teardown escalation', () => {
  it('kills an agent that ignores SIGTERM after the grace period', async () => {
    const { task } = await makeTask(w.api);
    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      await ws.request('subscribe', { task_id: task.id });
      const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000, { ignore_sigterm: true, ignore_cancel: true }) });
      const pid = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.pid as number | undefined);
      const res = await ws.request('task.stop', { task_id: task.id });
      expect(res.payload).toMatchObject({ task_id: task.id, status: 'stopped' });
      const stopped = await ws.waitFor((f) => f.action === 'execution.stopped' && f.payload.pid === pid, 15_000);
      expect(stopped.payload.how).toBe('killed');
      expect(processAlive(pid)).toBe(false);
      expect(w.agentEvents(pid).map((e) => e.kind)).toContain('sigterm_ignored');
    } finally {
      ws.close();
    }
  });
});

describe('access', () => {
  it('answers 401 without a token and 403/404 for another workspace, leaking nothing', async () => {
    const { task } = await makeTask(w.api);
    const anon = await fetch(`${w.stack.gatewayUrl}/tasks/${task.id}`);
    expect(anon.status).toBe(401);
    expect(((await anon.json()) as { error: { code: string } }).error.code).toBe('UNAUTHORIZED');
    const other = await w.stack.operatorToken(['00000000-0000-4000-8000-000000000000']);
    const res = await fetch(`${w.stack.gatewayUrl}/tasks/${task.id}`, { headers: { authorization: `Bearer ${other}` } });
    expect([403, 404]).toContain(res.status);
    const body = (await res.json()) as { error: { code: string } };
    expect(JSON.stringify(body)).not.toContain(task.title === 'task' ? task.workspace_id : task.title);
    expect(body.error.code).toMatch(/FORBIDDEN|NOT_FOUND/);
  });
});
