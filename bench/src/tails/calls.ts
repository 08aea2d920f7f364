import { connectMcp, eventually, WsClient } from '@kandev/testkit';
import type { BenchStack } from '../e2e.js';
import type { Mcp } from '../families.js';

/** One timed call: a parent's `stop_task_kandev` or an operator's `/ws` `agent.cancel`. */
export interface Call {
  kind: 'stop' | 'cancel';
  stack: string;
  /** Other agents running meanwhile. */
  background: number;
  ms: number;
  /** Epoch ms at the client, before the call and once it was answered. */
  from: number;
  to: number;
}

const epochNow = () => performance.timeOrigin + performance.now();
const SLEEP = JSON.stringify({ script: [{ sleep_ms: 600_000 }] });
/** A busy agent of the background: a line of output every second, for ten minutes. */
const CHATTY = JSON.stringify({ script: Array.from({ length: 600 }, (_, i) => [{ say: `line ${i}` }, { sleep_ms: 1_000 }]).flat() });

/**
 * A stack's callers: a coordinator task whose MCP client stops its children, and an operator's
 * `/ws` socket. Each call comes right after its session's launch: its agent has just started, and
 * the launch's own tail (admission, first prompt, the agent's start-up) is still on the machine.
 */
export class Callers {
  private constructor(
    readonly label: string,
    readonly b: BenchStack,
    private readonly workspaceId: string,
    private readonly parentId: string,
    private readonly mcp: Mcp,
    private readonly ws: WsClient,
  ) {}

  static async open(label: string, b: BenchStack): Promise<Callers> {
    const workspaceId = (await b.api.ok('POST', '/workspaces', { name: `tails-${label}` })).id as string;
    const parent = await b.api.ok('POST', '/tasks', { workspace_id: workspaceId, title: 'coordinator' });
    const mcp = await connectMcp(b.stack.mcpUrl, await b.stack.agentToken(parent.id));
    const ws = await WsClient.connect(b.stack.wsUrl, b.token);
    return new Callers(label, b, workspaceId, parent.id as string, mcp, ws);
  }

  /** A child task of the coordinator with a session whose agent runs `prompt`; resolves once its execution is RUNNING. */
  async launch(prompt = SLEEP, parentId: string | null = this.parentId): Promise<{ taskId: string; sessionId: string }> {
    const task = await this.b.api.ok('POST', '/tasks', { workspace_id: this.workspaceId, title: 'child', ...(parentId ? { parent_id: parentId } : {}) });
    for (let attempt = 1; ; attempt++) {
      const r = await this.b.api.call('POST', `/tasks/${task.id}/sessions`, { prompt });
      if (r.status < 300) {
        const sessionId = r.body.id as string;
        await eventually(async () => (await this.b.api.get(`/sessions/${sessionId}`)).body.execution?.status === 'RUNNING', 60_000, 10);
        return { taskId: task.id as string, sessionId };
      }
      // A busy lifecycle refuses a launch with 503 + Retry-After: come back as told.
      if (r.status !== 503 || attempt >= 20) throw new Error(`POST /tasks/${task.id}/sessions → ${r.status} ${JSON.stringify(r.body)}`);
      await new Promise((res) => setTimeout(res, 1_000 * Number(r.body?.error?.details?.retry_after_s ?? 1)));
    }
  }

  /** Launch a child, then stop it with the coordinator's `stop_task_kandev` (timed). */
  async stop(background: number): Promise<Call> {
    const { taskId } = await this.launch();
    const from = epochNow();
    const res = await this.mcp.callJson('stop_task_kandev', { task_id: taskId });
    const to = epochNow();
    if (res.isError || res.json?.status !== 'stopped') throw new Error(`stop_task_kandev failed: ${res.text}`);
    return { kind: 'stop', stack: this.label, background, ms: to - from, from, to };
  }

  /** Launch a child, cancel its turn on `/ws` (timed), then stop its task (not timed) so its agent goes. */
  async cancel(background: number): Promise<Call> {
    const { taskId, sessionId } = await this.launch();
    const from = epochNow();
    const res = await this.ws.request('agent.cancel', { session_id: sessionId });
    const to = epochNow();
    if (res.type !== 'response') throw new Error(`agent.cancel failed: ${JSON.stringify(res.payload)}`);
    await this.b.api.ok('POST', `/tasks/${taskId}/stop`);
    return { kind: 'cancel', stack: this.label, background, ms: to - from, from, to };
  }

  /** `n` other agents, each in a task of its own, writing a line a second; resolves once all run. Returns their stopper. */
  async background(n: number): Promise<() => Promise<void>> {
    const tasks: string[] = [];
    for (let i = 0; i < n; i += 4) {
      const batch = await Promise.allSettled(Array.from({ length: Math.min(4, n - i) }, async () => (await this.launch(CHATTY, null)).taskId));
      for (const r of batch) if (r.status === 'fulfilled') tasks.push(r.value);
    }
    if (tasks.length < n) console.error(`[tails] ${this.label}: ${tasks.length} of ${n} background agents started`);
    return async () => {
      await Promise.all(tasks.map((t) => this.b.api.ok('POST', `/tasks/${t}/stop`)));
    };
  }

  async close(): Promise<void> {
    this.ws.close();
    await this.mcp.close();
  }
}
