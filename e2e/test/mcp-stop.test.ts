import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { signAgentToken } from '@kandev/runtime';
import { connectMcp, eventually, processAlive } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * R-1 end to end: a coordinating agent stops and steers its child through a real MCP client;
 * the child is a real scripted agent process behind agentctl.
 */
let w: World;
beforeAll(async () => {
  // A short cancel timeout keeps the ignore_cancel case quick; the orchestrator's bound follows it.
  w = await startWorld({ CANCEL_TIMEOUT_MS: '1000' });
});
afterAll(async () => w?.stop());

async function family() {
  const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
  const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker' });
  const { task: sibling } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'sibling' });
  const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(parent.id));
  return { workspace_id, parent, child, sibling, mcp };
}

/** The agent's pid once the session's execution is RUNNING. */
const runningPid = (sessionId: string): Promise<number> =>
  eventually(async () => {
    const s = (await w.api.get(`/sessions/${sessionId}`)).body;
    return s.execution?.status === 'RUNNING' ? (s.execution.pid as number) : null;
  });

describe('stop_task_kandev', () => {
  it('halts a long-running child: stopped at once, session CANCELLED, task REVIEW, no prompt, queue kept, process gone', async () => {
    const f = await family();
    const { task: grandchild } = await makeTask(w.api, { workspace_id: f.workspace_id, parent_id: f.child.id, title: 'grandchild' });
    const session = await w.api.ok('POST', `/tasks/${f.child.id}/sessions`, { prompt: sleepScript(60_000) });
    const pid = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.pid as number | undefined);
    expect((await f.mcp.callJson('message_task_kandev', { task_id: f.child.id, prompt: 'for later' })).json.status).toBe('queued');
    const promptsBefore = w.agentEvents(pid).filter((e) => e.kind === 'prompt').length;

    const t0 = performance.now();
    const res = await f.mcp.callJson('stop_task_kandev', { task_id: f.child.id });
    const elapsed = performance.now() - t0;
    expect(res).toMatchObject({ isError: false, json: { task_id: f.child.id, status: 'stopped' } });
    expect(elapsed).toBeLessThan(1_000);

    const t = (await w.api.get(`/tasks/${f.child.id}`)).body;
    expect(t.status).toBe('REVIEW');
    expect(t.sessions[0]).toMatchObject({ id: session.id, state: 'CANCELLED' });
    expect((await w.api.get(`/tasks/${f.child.id}/queue`)).body).toHaveLength(1);
    expect((await w.api.get(`/tasks/${grandchild.id}`)).body.status).toBe('TODO');
    await eventually(async () => !processAlive(pid), 10_000);
    expect(w.agentEvents(pid).filter((e) => e.kind === 'prompt').length).toBe(promptsBefore);

    // Repeat: not_running, nothing changes.
    const again = await f.mcp.callJson('stop_task_kandev', { task_id: f.child.id });
    expect(again.json).toEqual({ task_id: f.child.id, status: 'not_running' });
    const t2 = (await w.api.get(`/tasks/${f.child.id}`)).body;
    expect(t2.updated_at).toBe(t.updated_at);
    expect(t2.sessions[0].updated_at).toBe(t.sessions[0].updated_at);
    // The task can be started again later.
    expect((await w.api.post(`/tasks/${f.child.id}/sessions`, { prompt: 'again' })).status).toBe(201);
  });

  it('refuses a sibling with FORBIDDEN as a tool error and changes nothing', async () => {
    const f = await family();
    await w.api.ok('POST', `/tasks/${f.child.id}/sessions`, { prompt: sleepScript(60_000) });
    const siblingMcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(f.sibling.id));
    const before = (await w.api.get(`/tasks/${f.child.id}`)).body;
    const res = await siblingMcp.callJson('stop_task_kandev', { task_id: f.child.id, sender_task_id: f.parent.id });
    expect(res.isError).toBe(true);
    expect(res.text).toMatch(/^backend error \[FORBIDDEN\]/);
    expect((await w.api.get(`/tasks/${f.child.id}`)).body).toEqual(before);
    await w.api.post(`/tasks/${f.child.id}/stop`);
  });

  it('stops every live session of the child', async () => {
    const f = await family();
    const a = await w.api.ok('POST', `/tasks/${f.child.id}/sessions`, { prompt: sleepScript(60_000) });
    const b = await w.api.ok('POST', `/tasks/${f.child.id}/sessions`, { prompt: sleepScript(60_000) });
    const pids = await Promise.all([a, b].map((s) => eventually(async () => (await w.api.get(`/sessions/${s.id}`)).body.execution?.pid as number | undefined)));
    expect((await f.mcp.callJson('stop_task_kandev', { task_id: f.child.id })).json.status).toBe('stopped');
    const t = (await w.api.get(`/tasks/${f.child.id}`)).body;
    expect(t.sessions.map((s: { state: string }) => s.state)).toEqual(['CANCELLED', 'CANCELLED']);
    for (const pid of pids) await eventually(async () => !processAlive(pid), 10_000);
  });
});

describe('message_task_kandev', () => {
  it('interrupts a running child and dispatches exactly the new message (sent)', async () => {
    const f = await family();
    const session = await w.api.ok('POST', `/tasks/${f.child.id}/sessions`, { prompt: sleepScript(60_000) });
    const pid = await runningPid(session.id);
    const res = await f.mcp.callJson('message_task_kandev', { task_id: f.child.id, prompt: 'new direction', delivery_mode: 'interrupt' });
    expect(res.json).toMatchObject({ task_id: f.child.id, session_id: session.id, status: 'sent' });
    const s = await eventually(async () => {
      const b = (await w.api.get(`/sessions/${session.id}`)).body;
      return b.turns.length === 2 && b.turns[1].completed_at ? b : null;
    });
    expect(s.turns.map((t: { stop_reason: string }) => t.stop_reason)).toEqual(['cancelled', 'end_turn']);
    const prompts = w.agentEvents(pid).filter((e) => e.kind === 'prompt');
    expect(JSON.stringify(prompts.at(-1))).toContain('new direction');
    expect(JSON.stringify(prompts.at(-1))).toContain(f.parent.id);
    expect((await w.api.get(`/tasks/${f.child.id}/queue`)).body).toEqual([]);
  });

  it('keeps an interrupt queued when the child ignores the cancel', async () => {
    const f = await family();
    const session = await w.api.ok('POST', `/tasks/${f.child.id}/sessions`, { prompt: sleepScript(60_000, { ignore_cancel: true }) });
    await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.status === 'RUNNING');
    const res = await f.mcp.callJson('message_task_kandev', { task_id: f.child.id, prompt: 'stop that', delivery_mode: 'interrupt' });
    expect(res.json.status).toBe('queued');
    expect((await w.api.get(`/tasks/${f.child.id}/queue`)).body).toHaveLength(1);
    // An interrupt that cannot land does not kill the child: its turn keeps running.
    await new Promise((r) => setTimeout(r, 500));
    const s = (await w.api.get(`/sessions/${session.id}`)).body;
    expect(s).toMatchObject({ state: 'RUNNING', execution: { status: 'RUNNING' } });
    await w.api.post(`/tasks/${f.child.id}/stop`);
  });

  it('refuses an interrupt from a non-parent and queues nothing', async () => {
    const f = await family();
    await w.api.ok('POST', `/tasks/${f.child.id}/sessions`, { prompt: sleepScript(60_000) });
    const siblingMcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(f.sibling.id));
    const res = await siblingMcp.callJson('message_task_kandev', { task_id: f.child.id, prompt: 'hijack', delivery_mode: 'interrupt' });
    expect(res.isError).toBe(true);
    expect(res.text).toMatch(/FORBIDDEN/);
    expect((await w.api.get(`/tasks/${f.child.id}/queue`)).body).toEqual([]);
    await w.api.post(`/tasks/${f.child.id}/stop`);
  });

  it('stop wins over an interrupt in flight: the child ends CANCELLED with no process left', async () => {
    const f = await family();
    const session = await w.api.ok('POST', `/tasks/${f.child.id}/sessions`, { prompt: sleepScript(60_000) });
    const pid = await runningPid(session.id);
    const [msg, stop] = await Promise.all([
      f.mcp.callJson('message_task_kandev', { task_id: f.child.id, prompt: sleepScript(60_000), delivery_mode: 'interrupt' }),
      f.mcp.callJson('stop_task_kandev', { task_id: f.child.id }),
    ]);
    expect(['sent', 'queued', 'started']).toContain(msg.json.status);
    expect(['stopped', 'not_running']).toContain(stop.json.status);
    // Whatever the order, nothing of the child is left running. A stop that ran after the interrupt
    // stops its new turn too. One that ran first left the message an idle child, which gets a
    // session of its own (`started`, R-1.8: an idle child gets the message delivered at once):
    // a second stop ends that one.
    const pids = [pid];
    if (msg.json.status === 'started') {
      pids.push(await runningPid(msg.json.session_id));
    }
    if (stop.json.status === 'not_running' || msg.json.status === 'started') {
      expect((await f.mcp.callJson('stop_task_kandev', { task_id: f.child.id })).json.status).toBe('stopped');
    }
    await eventually(async () => pids.every((p) => !processAlive(p)), 10_000);
    const t = (await w.api.get(`/tasks/${f.child.id}`)).body;
    expect(t.sessions.every((s: { state: string }) => s.state !== 'RUNNING' && s.state !== 'WAITING_FOR_INPUT')).toBe(true);
  });
});

describe('create_task_kandev', () => {
  it('creates a child of the caller in its workspace and starts it', async () => {
    const f = await family();
    const res = await f.mcp.callJson('create_task_kandev', { title: 'spawned', prompt: 'hello child' });
    expect(res.isError).toBe(false);
    expect(res.json).toMatchObject({ parent_id: f.parent.id, workspace_id: f.workspace_id, title: 'spawned' });
    const t = (await w.api.get(`/tasks/${res.json.id}`)).body;
    expect(t.status).toBe('IN_PROGRESS');
    expect(t.sessions).toHaveLength(1);
    expect((await f.mcp.callJson('stop_task_kandev', { task_id: res.json.id })).isError).toBe(false);
  });
});

describe('agent tokens live as long as their execution (SPEC R-9.3)', () => {
  /** One MCP request with this token, as an agent's client sends it: the HTTP status. */
  const mcpStatus = async (token: string) =>
    (
      await fetch(w.stack.mcpUrl, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      })
    ).status;

  it('the token of an execution is refused once the execution has ended, and never works for another task', async () => {
    const { task } = await makeTask(w.api, { title: 'token owner' });
    const { task: other } = await makeTask(w.api, { title: 'another task' });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000) });
    const { executionId, pid } = await eventually(async () => {
      const list = (await w.api.get(`/tasks/${task.id}/executions`)).body as Array<{ execution_id: string; status: string; pid: number }>;
      const e = list.find((x) => x.status === 'RUNNING');
      return e ? { executionId: e.execution_id, pid: e.pid } : null;
    });
    // The agent never inherits a token key (runService withholds them from every service's children).
    const environ = readFileSync(`/proc/${pid}/environ`, 'utf8');
    expect(environ).toContain('PATH=');
    expect(environ).not.toMatch(/KANDEV_(OPERATOR_|AGENT_)?JWT_SECRET/);
    // The claims lifecycle puts in the token it hands the agent (session/new's MCP server entry).
    const claims = { task_id: task.id, session_id: session.id, execution_id: executionId, mode: 'task' as const };
    const token = await signAgentToken(w.stack.agentKey, claims);
    expect(await mcpStatus(token)).toBe(200);
    // The same execution named under another task: refused while it runs.
    expect(await mcpStatus(await signAgentToken(w.stack.agentKey, { ...claims, task_id: other.id }))).toBe(401);

    await w.api.ok('POST', `/tasks/${task.id}/stop`, {});
    await eventually(async () => ((await w.api.get(`/tasks/${task.id}/executions`)).body as unknown[]).length === 0, 15_000);
    // Within MCP_EXECUTION_CACHE_MS (2 s) of the registry dropping it.
    await eventually(async () => (await mcpStatus(token)) === 401, 10_000);
    // A token naming no execution (npm run token -- agent) is the operator's choice: valid until it expires.
    expect(await mcpStatus(await w.stack.agentToken(task.id))).toBe(200);
  });
});
