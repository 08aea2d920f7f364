import { startAgentStack, type AgentStack, type ApiClient, type StackOptions } from '@kandev/testkit';

export const AGENTS = ['scripted-acp', 'scripted-codex'] as const;

export type World = AgentStack;

/** The whole stack with a scripted-agent observation log and an operator client; short teardown grace. */
export const startWorld = (env: NodeJS.ProcessEnv = {}, opts: Omit<StackOptions, 'env'> = {}): Promise<World> =>
  startAgentStack({ TEARDOWN_GRACE_MS: '500', ...env }, opts);

export const sleepScript = (ms: number, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ script: [{ sleep_ms: ms }, { say: 'done sleeping' }], ...extra });

/** Create a workspace and a task in it (optionally a child of parent). */
export async function makeTask(api: ApiClient, opts: { workspace_id?: string; parent_id?: string; title?: string; agent?: string } = {}) {
  const workspace_id = opts.workspace_id ?? (await api.ok('POST', '/workspaces', { name: 'e2e' })).id;
  const task = await api.ok('POST', '/tasks', {
    workspace_id,
    title: opts.title ?? 'task',
    ...(opts.parent_id ? { parent_id: opts.parent_id } : {}),
    ...(opts.agent ? { agent: opts.agent } : {}),
  });
  return { workspace_id, task };
}
