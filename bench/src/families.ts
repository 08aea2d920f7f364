import { connectMcp, eventually } from '@kandev/testkit';
import type { BenchStack } from './e2e.js';
import { recordWall } from './wall.js';

/* Tasks with running agents for the stop scenarios: a coordinator and its children. */

export type Mcp = Awaited<ReturnType<typeof connectMcp>>;

/** A coordinator task with its MCP client, and `n` children each running a long turn (`script`, a sleep by default). */
export async function family(b: BenchStack, n: number, script: unknown[] = [{ sleep_ms: 600_000 }]) {
  const workspace_id = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id;
  const parent = await b.api.ok('POST', '/tasks', { workspace_id, title: 'coordinator' });
  const mcp = await connectMcp(b.stack.mcpUrl, await b.stack.agentToken(parent.id));
  const children: string[] = [];
  const pids = new Map<string, number>();
  // Launch a few at a time: every child is two node processes (agentctl + agent).
  for (let i = 0; i < n; i += 8) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(8, n - i) }, async () => {
        const child = await b.api.ok('POST', '/tasks', { workspace_id, title: 'child', parent_id: parent.id });
        const s = await startSession(b, child.id, { prompt: JSON.stringify({ script }) });
        const exec = await eventually(async () => {
          const e = (await b.api.get(`/sessions/${s.id}`)).body.execution;
          return e?.status === 'RUNNING' ? e : null;
        }, 30_000);
        pids.set(child.id, exec.pid);
        return child.id as string;
      }),
    );
    children.push(...batch);
  }
  return { parent, mcp, children, pids };
}

/**
 * A session start that a busy lifecycle refuses with 503 + Retry-After (its launch admission,
 * R-6) is retried as a client should: launching many agents on a loaded 2-core machine meets it.
 */
async function startSession(b: BenchStack, taskId: string, body: Record<string, unknown>) {
  for (let attempt = 1; ; attempt++) {
    const r = await b.api.call('POST', `/tasks/${taskId}/sessions`, body);
    if (r.status < 300) return r.body;
    if (r.status !== 503 || attempt >= 10) throw new Error(`POST /tasks/${taskId}/sessions → ${r.status} ${JSON.stringify(r.body)}`);
    await new Promise((res) => setTimeout(res, 1_000 * Number(r.body?.error?.details?.retry_after_s ?? 1)));
  }
}

/** One stop_task_kandev of a child with a turn in flight; its latency in ms. */
export async function stopChild(mcp: Mcp, taskId: string): Promise<number> {
  const t = performance.now();
  const res = await mcp.callJson('stop_task_kandev', { task_id: taskId });
  const ms = performance.now() - t;
  recordWall('stop', t, ms);
  if (res.isError || res.json?.status !== 'stopped') throw new Error(`stop failed: ${res.text}`);
  return ms;
}
