import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { eventually, startAgentStack, startModelStub, type AgentStack, type ApiClient, type ModelStub, type StackService } from '@kandev/testkit';

/*
 * The published agents, installed from the npm registry as this workspace's pinned dependencies,
 * registered through KANDEV_AGENT_CATALOGUE exactly as docs/agents.md tells a user to, and pointed
 * at a local model stub instead of a vendor's API. Nothing here needs the internet.
 */

const require = createRequire(import.meta.url);
const binOf = (pkg: string, rel: string) => join(dirname(require.resolve(`${pkg}/package.json`)), rel);

/** `codex` as npm installs it (a Node launcher for the native binary inside the package). */
export const CODEX_BIN = binOf('@openai/codex', 'bin/codex.js');
export const CLAUDE_CODE_ACP_BIN = binOf('@zed-industries/claude-code-acp', 'dist/index.js');

export const REAL_AGENTS = ['codex', 'claude-code'] as const;
export type RealAgent = (typeof REAL_AGENTS)[number];

/** Catalogue names: `<agent>` runs tools without asking; `<agent>-asks` asks for approval first. */
export const asking = (agent: RealAgent) => `${agent}-asks`;

/** The model Codex is told it talks to: a row of pricing.ts, so usage gets a cost. */
export const CODEX_MODEL = 'gpt-5';

export interface LogLine {
  service: StackService;
  line: Record<string, unknown>;
}

export interface RealWorld extends AgentStack {
  stub: ModelStub;
  logs: LogLine[];
  home: string;
}

/** Codex's `-c` overrides that make the stub its model provider. */
export function codexProviderArgs(stubUrl: string, model = CODEX_MODEL): string[] {
  return ['-c', 'model_provider="kandev-stub"', '-c', 'model_providers.kandev-stub.name="kandev stub"', '-c', `model_providers.kandev-stub.base_url="${stubUrl}/v1"`, '-c', 'model_providers.kandev-stub.wire_api="responses"', '-c', `model="${model}"`];
}

function catalogue(stubUrl: string, home: string): Record<string, unknown> {
  const codexHome = join(home, 'codex-home');
  mkdirSync(codexHome, { recursive: true });
  // Claude Code reads settings.json in CLAUDE_CONFIG_DIR. kandev's MCP tools are allowed in both (else
  // Claude Code asks before each call); one config lets Bash run unasked, the other asks.
  const claudeAllow = join(home, 'claude-allow');
  const claudeAsk = join(home, 'claude-ask');
  mkdirSync(claudeAllow, { recursive: true });
  mkdirSync(claudeAsk, { recursive: true });
  writeFileSync(join(claudeAllow, 'settings.json'), JSON.stringify({ permissions: { allow: ['mcp__kandev', 'Bash'] } }));
  writeFileSync(join(claudeAsk, 'settings.json'), JSON.stringify({ permissions: { allow: ['mcp__kandev'] } }));
  // A home of the test's own: the agents' shells do not run the machine's profile scripts.
  const agentHome = join(home, 'home');
  mkdirSync(agentHome, { recursive: true });
  const claudeEnv = (configDir: string) => ({
    HOME: agentHome,
    ANTHROPIC_BASE_URL: stubUrl,
    ANTHROPIC_API_KEY: 'stub-key',
    CLAUDE_CONFIG_DIR: configDir,
    // As root: claude-code-acp offers bypass mode when IS_SANDBOX has any value, and the Claude Code
    // CLI then refuses to start as root unless it is exactly "1" (an inherited "yes" breaks session/new).
    IS_SANDBOX: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
  });
  return {
    codex: { protocol: 'codex', command: CODEX_BIN, args: ['app-server', ...codexProviderArgs(stubUrl), '-c', 'approval_policy="never"', '-c', 'sandbox_mode="danger-full-access"'], env: { HOME: agentHome, CODEX_HOME: codexHome } },
    'codex-asks': { protocol: 'codex', command: CODEX_BIN, args: ['app-server', ...codexProviderArgs(stubUrl), '-c', 'approval_policy="on-request"'], env: { HOME: agentHome, CODEX_HOME: codexHome } },
    'claude-code': { protocol: 'acp', command: CLAUDE_CODE_ACP_BIN, args: [], env: claudeEnv(claudeAllow) },
    'claude-code-asks': { protocol: 'acp', command: CLAUDE_CODE_ACP_BIN, args: [], env: claudeEnv(claudeAsk) },
  };
}

export async function startRealWorld(env: NodeJS.ProcessEnv = {}): Promise<RealWorld> {
  const home = mkdtempSync(join(tmpdir(), 'kandev-real-agents-'));
  const stub = await startModelStub({ logFile: process.env.MODEL_STUB_LOG });
  const file = join(home, 'catalogue.json');
  writeFileSync(file, JSON.stringify(catalogue(stub.url, home), null, 2));
  const logs: LogLine[] = [];
  const w = await startAgentStack(
    // Real agents take seconds to start (Claude Code loads its CLI): a generous handshake bound.
    { KANDEV_AGENT_CATALOGUE: file, TEARDOWN_GRACE_MS: '2000', LOG_LEVEL: 'info', LAUNCH_TIMEOUT_MS: '60000', ...env },
    {
      onLog: (service, line) => {
        try {
          logs.push({ service, line: JSON.parse(line) as Record<string, unknown> });
        } catch {
          // not JSON: not ours to read
        }
      },
    },
  );
  const stopStack = w.stop;
  return Object.assign(w, {
    stub,
    logs,
    home,
    async stop() {
      await stopStack();
      await stub.stop();
      rmSync(home, { recursive: true, force: true });
    },
  });
}

export async function makeTask(api: ApiClient, opts: { workspace_id?: string; parent_id?: string; title?: string; agent?: string } = {}) {
  const workspace_id = opts.workspace_id ?? (await api.ok('POST', '/workspaces', { name: 'real-agents' })).id;
  const task = await api.ok('POST', '/tasks', { workspace_id, title: opts.title ?? 'task', ...(opts.parent_id ? { parent_id: opts.parent_id } : {}), ...(opts.agent ? { agent: opts.agent } : {}) });
  return { workspace_id, task };
}

/** The session once its execution is up, with the agent's pid. */
export async function runningSession(api: ApiClient, sessionId: string, timeoutMs = 60_000) {
  return eventually(async () => {
    const s = (await api.get(`/sessions/${sessionId}`)).body;
    return s.execution?.pid && ['READY', 'RUNNING'].includes(s.execution.status) ? s : null;
  }, timeoutMs, 100);
}

/** The stub's first request whose user turn carries `marker` (prompts are unique per test). */
export function requestFor(stub: ModelStub, marker: string) {
  return stub.requests.find((r) => r.userText.includes(marker) && r.tools.length > 0);
}

/** Processes whose command line contains `needle`, from /proc. */
export function processesMatching(needle: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0/g, ' ');
      const state = readFileSync(`/proc/${name}/stat`, 'utf8').split(') ')[1]?.[0];
      if (cmd.includes(needle) && state !== 'Z') out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** Running (a zombie waiting to be reaped holds nothing and counts as gone). */
export function running(pid: number): boolean {
  try {
    const state = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0];
    return state !== undefined && state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** `root` and its descendants, from /proc. */
export function treeOf(root: number): number[] {
  const parent = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      parent.set(Number(name), Number(readFileSync(`/proc/${name}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const [pid, ppid] of parent) if (ppid === out[i]) out.push(pid);
  return out.filter((p) => parent.has(p));
}

/** Is `pid` a descendant of `ancestor` (walking ppid in /proc)? */
export function descendsFrom(pid: number, ancestor: number): boolean {
  for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
    if (p === ancestor) return true;
    try {
      p = Number(readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
    } catch {
      return false;
    }
  }
  return false;
}

/** The tool a script names for "run a shell command" in each agent, with its arguments. */
export function shellTool(agent: RealAgent, command: string, extra: Record<string, unknown> = {}): { tool: string; args: Record<string, unknown> } {
  return agent === 'codex'
    ? { tool: 'exec_command', args: { cmd: command, yield_time_ms: 1000, ...extra } }
    : { tool: 'Bash', args: { command, description: 'run the test command', ...extra } };
}
