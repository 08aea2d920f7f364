import { closeSync, readFileSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';

/*
 * agentctl's configuration: CLI flags first, then AGENTCTL_* environment variables. Parsed once at
 * start; anything malformed stops the process before an agent is spawned. lifecycle passes every
 * setting as AGENTCTL_* and no flag at all: /proc/<pid>/cmdline is readable by every uid, so flags
 * would show each execution's ids (and any token) to every agent of the host; /proc/<pid>/environ
 * needs the process's own uid. The flags stay for hand-run agentctls and benchmarks.
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
  /**
   * The execution secret arrives on this inherited file descriptor (a pipe lifecycle writes
   * it to and closes): never argv (anyone can list it) and not the environment (the agent runs
   * under agentctl's uid and could read /proc/<agentctl>/environ). Read once and closed at start.
   */
  secretFd: z.preprocess((v) => (v === '' || v === undefined ? undefined : v), z.coerce.number().int().min(3).max(1024).optional()),
  /** For a hand-run agentctl only: the secret in AGENTCTL_SECRET (readable by the agent; see docs/security.md). */
  secret: z.preprocess((v) => (v === '' ? undefined : v), z.string().min(16, 'AGENTCTL_SECRET must be at least 16 characters').optional()),
  /**
   * Names of variables of agentctl's environment that its agent also gets (comma-separated), on top
   * of the basics (PATH, HOME, locale, proxies, TMPDIR) and the catalogue entry's own `env`.
   */
  agentEnv: z.preprocess(
    (v) =>
      typeof v === 'string'
        ? v
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean)
        : [],
    z.array(z.string()),
  ),
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
  'secret-fd': ['secretFd', 'AGENTCTL_SECRET_FD'],
  'agent-env': ['agentEnv', 'AGENTCTL_AGENT_ENV'],
} as const satisfies Record<string, readonly [keyof AgentctlConfig, string]>;

/** Every environment variable agentctl's configuration reads (docs/operations.md lists each). */
export const AGENTCTL_ENV: readonly string[] = Object.values(options).map(([, name]) => name);

/** Environment variables that carry secrets for agentctl alone; they are removed from the agent's environment. */
export const SECRET_ENV = ['AGENTCTL_MCP_TOKEN', 'AGENTCTL_SECRET'] as const;

/**
 * What the agent inherits from agentctl's environment: the basics a program expects (its PATH, a
 * HOME, locale, time zone, a TMPDIR, proxies to reach its model provider, CA bundles) and the names
 * listed in `extra` (AGENTCTL_AGENT_ENV). Nothing else: no AGENTCTL_* (the MCP token, the secret),
 * no OTEL_* or control-plane variables. The catalogue entry's `env` is added on top by the spawn.
 */
const AGENT_BASE_ENV =
  /^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|LC_[A-Z_]+|TZ|TERM|TMPDIR|(HTTPS?|NO|ALL)_PROXY|(https?|no|all)_proxy|NODE_EXTRA_CA_CERTS|SSL_CERT_FILE|SSL_CERT_DIR)$/;

export function agentEnvironment(env: NodeJS.ProcessEnv, extra: readonly string[]): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined || (SECRET_ENV as readonly string[]).includes(k)) continue;
    if (AGENT_BASE_ENV.test(k) || extra.includes(k)) out[k] = v;
  }
  return out;
}

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
  // No flag for the secret itself: a flag is visible to anyone who can list processes.
  raw.secret = env.AGENTCTL_SECRET;
  const result = AgentctlConfig.safeParse(raw);
  if (!result.success) throw new ConfigError(z.prettifyError(result.error));
  if (result.data.mcpToken && !result.data.mcpUrl) throw new ConfigError('an MCP token needs an MCP URL (--mcp-url)');
  if (!isDirectory(result.data.cwd)) throw new ConfigError(`working directory ${result.data.cwd} does not exist`);
  return result.data;
}

/** The config as it may be logged: the token is reduced to whether there is one. */
export function describeConfig(config: AgentctlConfig): Record<string, unknown> {
  const { mcpToken, secret, ...rest } = config;
  return { ...rest, mcpToken: mcpToken ? '[set]' : '[unset]', secret: secret ? '[set]' : '[unset]' };
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * The execution secret: read whole from `secretFd` (then closed, so the agent never inherits it),
 * else AGENTCTL_SECRET. agentctl refuses to start without one: its API must answer only its owner.
 */
export function readExecutionSecret(config: AgentctlConfig): string {
  let secret = config.secret;
  if (config.secretFd !== undefined) {
    try {
      secret = readFileSync(config.secretFd, 'utf8').trim();
    } catch (err) {
      throw new ConfigError(`cannot read the execution secret from fd ${config.secretFd}: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      try {
        closeSync(config.secretFd);
      } catch {
        // already closed
      }
    }
  }
  if (!secret || secret.length < 16) throw new ConfigError('an execution secret of at least 16 characters is required (--secret-fd or AGENTCTL_SECRET)');
  return secret;
}
