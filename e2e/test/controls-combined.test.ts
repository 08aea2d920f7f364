import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcp, eventually, type ApiClient } from '@kandev/testkit';
import { makeTask, serviceLogMark, serviceLogSince, sharedWorld, type SharedWorld } from './support.js';

/**
 * R-10 end to end, through the public surfaces only: the controls used together. A cancelled task
 * gets no session from any path, starts of one task coalesce into one session, a message
 * to a paused member waits in the task's queue, preview sees a hold on any member.
 */
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

type Wakeup = { id: string; status: string; skip_reason: string | null; session_id: string | null };
const finished = (api: ApiClient, id: string, timeoutMs = 30_000) =>
  eventually(async () => {
    const x = (await api.get(`/wakeups/${id}`)).body as Wakeup;
    return x.status === 'finished' || x.status === 'cancelled' ? x : null;
  }, timeoutMs);
const sessionsOf = async (api: ApiClient, taskId: string) =>
  (await api.get(`/tasks/${taskId}`)).body.sessions as Array<{ id: string; state: string; error_message: string | null }>;

describe('a cancelled task gets no new session (R-10.1)', () => {
  it('wakeup: finished task_cancelled; operator start and message_task_kandev: CONFLICT, nothing queued or launched', async () => {
    const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker' });
    await w.api.ok('PATCH', `/tasks/${child.id}`, { status: 'CANCELLED' });

    const wake = await w.api.ok('POST', '/wakeups', { task_id: child.id, reason: 'task_comment', payload: { prompt: 'wake up' } });
    expect(await finished(w.api, wake.id)).toMatchObject({ status: 'finished', skip_reason: 'task_cancelled', session_id: null });

    const start = await w.api.post(`/tasks/${child.id}/sessions`, { prompt: 'hello' });
    expect(start.status).toBe(409);
    expect(start.body.error.code).toBe('CONFLICT');

    const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(parent.id));
    try {
      const msg = await mcp.callJson('message_task_kandev', { task_id: child.id, prompt: 'are you there?' });
      expect(msg.isError).toBe(true);
      expect(msg.text).toContain('[CONFLICT]');
    } finally {
      await mcp.close();
    }
    const t = (await w.api.get(`/tasks/${child.id}`)).body;
    expect(t.status).toBe('CANCELLED');
    expect(t.sessions).toEqual([]);
    expect((await w.api.get(`/tasks/${child.id}/queue`)).body).toEqual([]);
  });
});

describe('starts of one task coalesce', () => {
  const deadlocks = (lines: string[]) => lines.filter((l) => /deadlock/i.test(l));

  it('20 concurrent wakeups on one idle task: one session, none FAILED, every wakeup finished with it, no deadlock', async () => {
    const mark = serviceLogMark();
    const { task } = await makeTask(w.api, { title: 'woken twenty times' });
    const posted = await Promise.all(
      Array.from({ length: 20 }, (_, i) => w.api.ok('POST', '/wakeups', { task_id: task.id, reason: 'task_comment', payload: { prompt: `wake ${i}` } })),
    );
    const done = await Promise.all(posted.map((p) => finished(w.api, p.id, 60_000)));
    const sessions = await sessionsOf(w.api, task.id);
    expect(sessions).toHaveLength(1);
    expect(sessions[0]!.state).not.toBe('FAILED');
    expect(new Set(done.map((d) => d.session_id))).toEqual(new Set([sessions[0]!.id]));
    expect(deadlocks(serviceLogSince(mark))).toEqual([]);
  });

  it('20 concurrent operator starts on one idle task: one session, none FAILED, every answer is that session, no deadlock', async () => {
    const mark = serviceLogMark();
    const { task } = await makeTask(w.api, { title: 'started twenty times' });
    const answers = await Promise.all(Array.from({ length: 20 }, () => w.api.post(`/tasks/${task.id}/sessions`, { prompt: 'hello' })));
    expect(answers.map((a) => a.status).filter((s) => s !== 200 && s !== 201)).toEqual([]);
    const sessions = await sessionsOf(w.api, task.id);
    expect(sessions).toHaveLength(1);
    expect(sessions[0]!.state).not.toBe('FAILED');
    expect(new Set(answers.map((a) => a.body.id))).toEqual(new Set([sessions[0]!.id]));
    expect(deadlocks(serviceLogSince(mark))).toEqual([]);
  });
});

describe('a message to a paused member is stored, not refused (R-10.2)', () => {
  it('answers queued, shows in the queue, and the first session after the resume delivers it', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'coordinator' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'worker' });
    await w.api.ok('POST', `/tasks/${root.id}/tree/pause`, { reason: 'hold on' });

    const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(root.id));
    try {
      const msg = await mcp.callJson('message_task_kandev', { task_id: child.id, prompt: 'after the pause, do this' });
      expect(msg).toMatchObject({ isError: false, json: { task_id: child.id, status: 'queued' } });
    } finally {
      await mcp.close();
    }
    const queue = (await w.api.get(`/tasks/${child.id}/queue`)).body as Array<{ prompt: string; sender_task_id: string }>;
    expect(queue.map((m) => [m.prompt, m.sender_task_id])).toEqual([['after the pause, do this', root.id]]);
    expect(await sessionsOf(w.api, child.id)).toEqual([]);

    await w.api.ok('POST', `/tasks/${root.id}/tree/resume`);
    // The first session after the release delivers it (a start without a prompt drains the queue first).
    const s = await w.api.ok('POST', `/tasks/${child.id}/sessions`, {});
    const transcript = await eventually(async () => {
      const items = (await w.api.get(`/sessions/${s.id}/messages`)).body.items as Array<{ kind: string; text: string }>;
      return items.some((i) => i.kind === 'prompt' && i.text === 'after the pause, do this') ? items : null;
    });
    expect(transcript.filter((i) => i.kind === 'prompt')).toHaveLength(1);
    expect((await w.api.get(`/tasks/${child.id}/queue`)).body).toEqual([]);
  });
});

describe('preview sees a hold on any member (R-10.4)', () => {
  it('reports the pause of a child subtree when previewing the root', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'root' });
    const { task: a } = await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'a' });
    const { task: aa } = await makeTask(w.api, { workspace_id, parent_id: a.id, title: 'aa' });
    const hold = (await w.api.ok('POST', `/tasks/${a.id}/tree/pause`)).hold;
    try {
      const preview = await w.api.ok('POST', `/tasks/${root.id}/tree/preview`);
      expect(preview.task_count).toBe(3);
      expect(preview.active_hold).toMatchObject({ id: hold.id, mode: 'pause', root_task_id: a.id });
      // What preview warned about: a cancel of the root is refused.
      expect((await w.api.post(`/tasks/${root.id}/tree/cancel`)).status).toBe(409);
      expect((await w.api.ok('POST', `/tasks/${aa.id}/tree/preview`)).active_hold).toMatchObject({ id: hold.id });
    } finally {
      await w.api.ok('POST', `/tasks/${a.id}/tree/resume`);
    }
    expect((await w.api.ok('POST', `/tasks/${root.id}/tree/preview`)).active_hold).toBeNull();
  });
});
