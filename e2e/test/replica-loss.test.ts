import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcp, eventually } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * B-6 end to end: with two orchestrator replicas, losing one costs a caller at most a resend
 * (ADR 0032), never its whole deadline. Reproduces the report: kill -9 of the second orchestrator,
 * idle between two child stops, made the next `stop_task_kandev` wait 30 s and fail UNAVAILABLE.
 */
let w: World;
beforeAll(async () => {
  w = await startWorld();
});
afterAll(async () => w?.stop());

/** A coordinator with `n` children, each running a long turn. */
async function busyFamily(n: number) {
  const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
  const children = [];
  for (let i = 0; i < n; i++) {
    const { task } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: `worker ${i}` });
    await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(120_000) });
    children.push(task);
  }
  for (const c of children)
    await eventually(async () => (await w.api.get(`/tasks/${c.id}`)).body.sessions.some((s: { state: string }) => s.state === 'RUNNING'), 30_000);
  const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(parent.id));
  return { children, mcp };
}

describe('an orchestrator replica lost between requests', () => {
  it('a frozen replica (its connection still open) costs the stops routed to it a resend, not their deadline', async () => {
    const replica = await w.stack.addReplica('orchestrator');
    const { children, mcp } = await busyFamily(6);
    try {
      // SIGSTOP: the server keeps routing half the requests to it until its ping timeout (minutes).
      process.kill(replica.pid, 'SIGSTOP');
      for (const c of children) {
        const r = await mcp.callJson('stop_task_kandev', { task_id: c.id });
        expect(r.isError, r.text).toBe(false);
        expect(r.json).toEqual({ task_id: c.id, status: 'stopped' });
      }
    } finally {
      process.kill(replica.pid, 'SIGKILL');
      await mcp.close();
    }
  });

  it('kill -9 of a replica right before a stop: the stop still answers', async () => {
    const replica = await w.stack.addReplica('orchestrator');
    const { children, mcp } = await busyFamily(3);
    try {
      expect((await mcp.callJson('stop_task_kandev', { task_id: children[0]!.id })).json.status).toBe('stopped');
      process.kill(replica.pid, 'SIGKILL');
      for (const c of children.slice(1)) {
        const r = await mcp.callJson('stop_task_kandev', { task_id: c.id });
        expect(r.isError, r.text).toBe(false);
        expect(r.json.status).toBe('stopped');
      }
    } finally {
      await mcp.close();
    }
  });
});
