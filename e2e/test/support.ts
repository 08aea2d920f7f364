import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiClient, startStack, type Stack } from '@kandev/testkit';
import { readAgentEvents, type AgentEvent } from '@kandev/testkit/agents/events';

export const AGENTS = ['scripted-acp', 'scripted-codex'] as const;

export interface World {
  stack: Stack;
  api: ApiClient;
  token: string;
  eventsFile: string;
  agentEvents(pid: number): AgentEvent[];
  stop(): Promise<void>;
}

/** The whole stack with a scripted-agent observation log, and an operator API client for all workspaces. */
export async function startWorld(env: NodeJS.ProcessEnv = {}): Promise<World> {
  const eventsFile = join(mkdtempSync(join(tmpdir(), 'kandev-agent-events-')), 'events.jsonl');
  const stack = await startStack({ env: { SCRIPTED_AGENT_EVENTS: eventsFile, TEARDOWN_GRACE_MS: '500', ...env } });
  const token = await stack.operatorToken();
  return {
    stack,
    api: new ApiClient(stack.gatewayUrl, token),
    token,
    eventsFile,
    agentEvents: (pid) => readAgentEvents(eventsFile).filter((e) => e.pid === pid),
    stop: () => stack.stop(),
  };
}

export const sleepScript = (ms: number, extra: Record<string, unknown> = {}) => JSON.stringify({ script: [{ sleep_ms: ms }, { say: 'done sleeping' }], ...extra });

/** Create a workspace and a task in it (optionally a child of parent). */
export async function makeTask(api: ApiClient, opts: { workspace_id?: string; parent_id?: string; title?: string; agent?: string } = {}) {
  const workspace_id = opts.workspace_id ?? (await api.ok('POST', '/workspaces', { name: 'e2e' })).id;
  const task = await api.ok('POST', '/tasks', { workspace_id, title: opts.title ?? 'task', ...(opts.parent_id ? { parent_id: opts.parent_id } : {}), ...(opts.agent ? { agent: opts.agent } : {}) });
  return { workspace_id, task };
}
