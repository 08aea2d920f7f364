import { readFileSync, statSync } from 'node:fs';
import postgres from 'postgres';
import { inject } from 'vitest';
import { ACTIVE_SESSION_STATES } from '@kandev/contracts';
import { agentEventsOf, ApiClient, stackTokens, startAgentStack, type AgentStack, type Stack, type StackOptions, type StackService } from '@kandev/testkit';
import { WORLD_ENV } from './shared-stack.setup.js';

export const AGENTS = ['scripted-acp', 'scripted-codex'] as const;

export type World = AgentStack;

/** The whole stack with a scripted-agent observation log and an operator client; short teardown grace. */
export const startWorld = (env: NodeJS.ProcessEnv = {}, opts: Omit<StackOptions, 'env'> = {}): Promise<World> =>
  startAgentStack(
    { ...WORLD_ENV, ...env },
    {
      ...opts,
      onLog: (name, line) => {
        worldLog.push(`[${name}] ${line}`);
        if (worldLog.length > WORLD_LOG_LINES) worldLog.splice(0, worldLog.length - WORLD_LOG_LINES);
        worldLogCount++;
        opts.onLog?.(name, line);
      },
    },
  );

/**
 * The services' log lines (the stacks' level: warn and above) of the worlds this worker started,
 * the newest WORLD_LOG_LINES, and of the shared stack (its file): a failing test prints those of its
 * own run (failure-logs.ts), so a failure in CI says what the services saw.
 */
const worldLog: string[] = [];
const WORLD_LOG_LINES = 2_000;
let worldLogCount = 0;

export interface ServiceLogMark {
  world: number;
  shared: number;
}

export function serviceLogMark(): ServiceLogMark {
  return { world: worldLogCount, shared: sharedLogSize() };
}

export function serviceLogSince(mark: ServiceLogMark): string[] {
  const own = worldLog.slice(Math.max(0, worldLog.length - (worldLogCount - mark.world)));
  const file = inject('sharedStack')?.logFile ?? '';
  const shared = sharedLogSize() > mark.shared ? readFileSync(file).subarray(mark.shared).toString('utf8').split('\n').filter(Boolean) : [];
  return [...own, ...shared.map((l) => `(shared stack) ${l}`)];
}

function sharedLogSize(): number {
  try {
    return statSync(inject('sharedStack')?.logFile ?? '').size;
  } catch {
    return 0; // the shared stack is gone (the run is ending)
  }
}

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

/** The part of a stack a file on the shared stack may use: addresses, keys, the database, the processes' pids. */
export interface SharedStack extends Pick<
  Stack,
  'gatewayUrl' | 'wsUrl' | 'mcpUrl' | 'stateDir' | 'secret' | 'operatorKey' | 'agentKey' | 'operatorToken' | 'agentToken'
> {
  db: { url: string };
  services: ReadonlyMap<StackService, { pid: number }>;
}

export interface SharedWorld extends Omit<World, 'stack'> {
  stack: SharedStack;
}

/**
 * The run's shared stack (shared-stack.setup.ts), for a file that needs the default settings and
 * leaves the stack as it found it. `stop()` does not stop the stack: it stops every task the file
 * left with a live session, so the next file starts on a quiet stack.
 */
export async function sharedWorld(): Promise<SharedWorld> {
  const info = inject('sharedStack');
  const tokens = stackTokens(info.operatorKey, info.agentKey);
  const token = await tokens.operatorToken();
  const api = new ApiClient(info.gatewayUrl, token);
  return {
    stack: {
      gatewayUrl: info.gatewayUrl,
      wsUrl: info.wsUrl,
      mcpUrl: info.mcpUrl,
      db: { url: info.dbUrl },
      stateDir: info.stateDir,
      secret: info.operatorKey,
      operatorKey: info.operatorKey,
      agentKey: info.agentKey,
      services: new Map(Object.entries(info.pids).map(([name, pid]) => [name as StackService, { pid }])),
      ...tokens,
    },
    api,
    token,
    eventsFile: info.eventsFile,
    agentEvents: agentEventsOf(info.eventsFile),
    stop: () => stopLiveTasks(api, info.dbUrl),
  };
}

/** Stops, through the operator API, every task that still has a live session. */
async function stopLiveTasks(api: ApiClient, dbUrl: string): Promise<void> {
  const sql = postgres(dbUrl, { max: 1, onnotice: () => undefined });
  try {
    const live = await sql<{ task_id: string }[]>`SELECT DISTINCT task_id FROM orchestrator.sessions WHERE state = ANY(${[...ACTIVE_SESSION_STATES]})`;
    for (const { task_id } of live) await api.ok('POST', `/tasks/${task_id}/stop`, {});
  } finally {
    await sql.end();
  }
}
