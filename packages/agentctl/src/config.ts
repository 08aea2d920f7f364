import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';

/*
 * agentctl's configuration: CLI flags first, then AGENTCTL_* environment variables. Parsed once at
 * start; anything malformed stops the process before an agent is spawned. Prefer
 * AGENTCTL_MCP_TOKEN over --mcp-token: a flag is visible to anyone who can list processes.
 */

const optionalText = z.preprocess((v) => (v === '' ? undefined : v), z.string().min(1).optional());
const millis = (fallback: number) => z.preprocess((v) => (v === '' || v === undefined ? fallback : v), z.coerce.number().int().positive().max(600_000));

export const AgentctlConfig = z.object({
  agent: z.string({ error: 'an agent is required (--agent or AGENTCTL_AGENT)' }).min(1),
  port: z.preprocess((v) => (v === '' || v === undefined ? 0 : v), z.coerce.number().int().min(0).max(65_535)),
  host: z.preprocess((v) => (v === '' || v === undefined ? '127.0.0.1' : v), z.string().min(1)),
  cwd: z.preprocess((v) => resolve(typeof v === 'string' && v !== '' ? v : process.cwd()), z.string()),
  executionId: optionalText,
  sessionId: optionalText,
  taskId: optionalText,
  mcpUrl: z.preprocess((v) => (v === '' ? undefined : v), z.url({ protocol: /^https?$/ }).optional()),
  mcpToken: optionalText,
  cancelTimeoutMs: millis(5000),
  handshakeTimeoutMs: millis(30_000),
  logLevel: z.preprocess((v) => (v === '' || v === undefined ? 'info' : v), z.enum(['debug', 'info', 'warn', 'error'])),
  /**
   * Stop the agent and exit when stdin closes: the parent (the lifecycle instance) holds the other
   * end of the pipe, so this fires however the parent dies, SIGKILL included (B-4: no lingering agents).
   */
  exitWithParent: z.preprocess((v) => v === true || v === 'true' || v === '1', z.boolean()),
  /**
   * With `exitWithParent`: the parent writes a heartbeat byte to stdin periodically; after this long
   * without one the parent is taken as frozen or hung (alive, so stdin stays open) and the agent is
   * stopped as if stdin had closed. 0 = no heartbeat expected.
   */
  ownerSilenceMs: z.preprocess((v) => (v === '' || v === undefined ? 0 : v), z.coerce.number().int().nonnegative().max(3_600_000)),
  /**
   * How much lower the agent's CPU priority is than agentctl's own (a nice increment, 0–19). The
   * agent and what it runs (builds, tests) then yield the CPU to the control plane, agentctl
   * included, so a stop or a cancel is not queued behind the work it is meant to stop.
   */
  agentNice: z.preprocess((v) => (v === '' || v === undefined ? 0 : v), z.coerce.number().int().min(0).max(19)),
  /**
   * With `exitWithParent`: once stdin closes (the parent is gone, and with it the reader of
   * stderr), log lines are appended to this file instead, for the parent's next run to read.
   */
  logFile: z.preprocess((v) => (typeof v === 'string' && v !== '' ? resolve(v) : undefined), z.string().optional()),
});
export type AgentctlConfig = z.infer<typeof AgentctlConfig>;

/** Flag name → config key → environment variable. */
const options = {
  agent: ['agent', 'AGENTCTL_AGENT'],
  port: ['port', 'AGENTCTL_PORT'],
  host: ['host', 'AGENTCTL_HOST'],
  cwd: ['cwd', 'AGENTCTL_CWD'],
  'execution-id': ['executionId', 'AGENTCTL_EXECUTION_ID'],
  'session-id': ['sessionId', 'AGENTCTL_SESSION_ID'],
  'task-id': ['taskId', 'AGENTCTL_TASK_ID'],
  'mcp-url': ['mcpUrl', 'AGENTCTL_MCP_URL'],
  'mcp-token': ['mcpToken', 'AGENTCTL_MCP_TOKEN'],
  'cancel-timeout-ms': ['cancelTimeoutMs', 'AGENTCTL_CANCEL_TIMEOUT_MS'],
  'handshake-timeout-ms': ['handshakeTimeoutMs', 'AGENTCTL_HANDSHAKE_TIMEOUT_MS'],
  'log-level': ['logLevel', 'AGENTCTL_LOG_LEVEL'],
  'exit-with-parent': ['exitWithParent', 'AGENTCTL_EXIT_WITH_PARENT'],
  'owner-silence-ms': ['ownerSilenceMs', 'AGENTCTL_OWNER_SILENCE_MS'],
  'agent-nice': ['agentNice', 'AGENTCTL_AGENT_NICE'],
  'log-file': ['logFile', 'AGENTCTL_LOG_FILE'],
} as const satisfies Record<string, readonly [keyof AgentctlConfig, string]>;

/** Every environment variable agentctl's configuration reads (docs/operations.md lists each). */
export const AGENTCTL_ENV: readonly string[] = Object.values(options).map(([, name]) => name);

/** Environment variables that carry secrets for agentctl alone; they are removed from the agent's environment. */
export const SECRET_ENV = ['AGENTCTL_MCP_TOKEN'] as const;

export class ConfigError extends Error {}

export function loadConfig(argv: readonly string[], env: NodeJS.ProcessEnv): AgentctlConfig {
  let flags: Record<string, string | undefined>;
  try {
    const parsed = parseArgs({
      args: [...argv],
      options: Object.fromEntries(Object.keys(options).map((name) => [name, { type: 'string' as const }])),
      strict: true,
      allowPositionals: false,
    });
    flags = parsed.values as Record<string, string | undefined>;
  } catch (err) {
    throw new ConfigError(err instanceof Error ? err.message : String(err));
  }
  const raw: Record<string, string | undefined> = {};
  for (const [flag, [key, envName]] of Object.entries(options)) {
    raw[key] = flags[flag] ?? env[envName];
  }
  const result = AgentctlConfig.safeParse(raw);
  if (!result.success) throw new ConfigError(z.prettifyError(result.error));
  if (result.data.mcpToken && !result.data.mcpUrl) throw new ConfigError('an MCP token needs an MCP URL (--mcp-url)');
  if (!isDirectory(result.data.cwd)) throw new ConfigError(`working directory ${result.data.cwd} does not exist`);
  return result.data;
}

/** The config as it may be logged: the token is reduced to whether there is one. */
export function describeConfig(config: AgentctlConfig): Record<string, unknown> {
  const { mcpToken, ...rest } = config;
  return { ...rest, mcpToken: mcpToken ? '[set]' : '[unset]' };
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
