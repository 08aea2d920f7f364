import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import {
  eventually,
  findRealAgents,
  hasEnded,
  listPids,
  readCmdline,
  readProcStat,
  startAgentStack,
  startModelStub,
  writeRealAgentCatalogue,
  type AgentStack,
  type ApiClient,
  type ModelStub,
  type RealAgent,
  type StackService,
} from '@kandev/testkit';

/*
 * The published agents, installed from the npm registry as this directory's pinned dependencies
 * (its own lockfile; install.mjs, run by its `npm test`),
 * registered through KANDEV_AGENT_CATALOGUE exactly as docs/agents.md tells a user to, and pointed
 * at a local model stub instead of a vendor's API. Nothing here needs the internet.
 */

export { CODEX_MODEL, REAL_AGENTS, type RealAgent } from '@kandev/testkit';

/** Catalogue names: `<agent>` runs tools without asking; `<agent>-asks` asks for approval first. */
export const asking = (agent: RealAgent) => `${agent}-asks`;

export interface LogLine {
  service: StackService;
  line: Record<string, unknown>;
}

export interface RealWorld extends AgentStack {
  stub: ModelStub;
  logs: LogLine[];
  home: string;
}

export async function startRealWorld(env: NodeJS.ProcessEnv = {}): Promise<RealWorld> {
  const home = mkdtempSync(join(tmpdir(), 'kandev-real-agents-'));
  const stub = await startModelStub({ logFile: process.env.MODEL_STUB_LOG });
  // This directory pins the agents and its `npm test` installs them; a missing one is a failure, not a skip.
  const bins = findRealAgents();
  if (!bins)
    throw new Error('the published agents are not installed in agents-e2e/node_modules: run `node agents-e2e/install.mjs` (or `npm test` in agents-e2e)');
  const file = writeRealAgentCatalogue(bins, stub.url, home);
  const logs: LogLine[] = [];
  const w = await startAgentStack(
    // Real agents take seconds to start (Claude Code loads its CLI): a generous handshake bound.
    // Agents reach only the MCP endpoint on loopback (ADR 0057); the model stub stands in for the
    // vendor's API, which a real deployment reaches off-host, so its port is allowed by name.
    {
      KANDEV_AGENT_CATALOGUE: file,
      TEARDOWN_GRACE_MS: '2000',
      LOG_LEVEL: 'info',
      LAUNCH_TIMEOUT_MS: '60000',
      AGENT_LOOPBACK_PORTS: new URL(stub.url).port,
      ...env,
    },
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

/**
 * When a test of the calling file fails, print what the model stub was asked and answered and the
 * stack's warnings and errors since the test began: a real agent that stalls on a shared CI machine
 * (it never called the model, the model's tool was not offered, the tool call never reached MCP)
 * is then told apart from the failure's last line alone.
 */
export function reportOnFailure(world: () => RealWorld | undefined): void {
  let firstRequest = 0;
  let firstLog = 0;
  afterEach((ctx) => {
    const w = world();
    if (!w) return;
    const from = { requests: firstRequest, logs: firstLog };
    firstRequest = w.stub.requests.length;
    firstLog = w.logs.length;
    if (ctx.task.result?.state !== 'fail') return;
    const requests = w.stub.requests.slice(from.requests).map((r) => ({
      at: new Date(r.at).toISOString(),
      path: r.path,
      reply: r.reply,
      tools: r.tools.length,
      kandev_tools: r.tools.filter((t) => t.name.includes('kandev')).map((t) => t.name),
      tool_results: r.toolResults.length,
      user: r.userText.slice(-160),
    }));
    const logs = w.logs
      .slice(from.logs)
      .filter(({ line }) => line.level === 'warn' || line.level === 'error')
      .slice(-40);
    console.error(
      `[diagnosis] ${ctx.task.name}\nmodel stub requests:\n${JSON.stringify(requests, null, 1)}\nstack warnings and errors:\n${logs.map((l) => `${l.service} ${JSON.stringify(l.line).slice(0, 600)}`).join('\n')}`,
    );
  });
}

export async function makeTask(api: ApiClient, opts: { workspace_id?: string; parent_id?: string; title?: string; agent?: string } = {}) {
  const workspace_id = opts.workspace_id ?? (await api.ok('POST', '/workspaces', { name: 'real-agents' })).id;
  const task = await api.ok('POST', '/tasks', {
    workspace_id,
    title: opts.title ?? 'task',
    ...(opts.parent_id ? { parent_id: opts.parent_id } : {}),
    ...(opts.agent ? { agent: opts.agent } : {}),
  });
  return { workspace_id, task };
}

/** The session once its execution is up, with the agent's pid. */
export async function runningSession(api: ApiClient, sessionId: string, timeoutMs = 60_000) {
  return eventually(
    async () => {
      const s = (await api.get(`/sessions/${sessionId}`)).body;
      return s.execution?.pid && ['READY', 'RUNNING'].includes(s.execution.status) ? s : null;
    },
    timeoutMs,
    100,
  );
}

/** The stub's first request whose user turn carries `marker` (prompts are unique per test). */
export function requestFor(stub: ModelStub, marker: string) {
  return stub.requests.find((r) => r.userText.includes(marker) && r.tools.length > 0);
}

/** Processes whose command line contains `needle`, from /proc. */
export function processesMatching(needle: string): number[] {
  return listPids().filter((pid) => pid !== process.pid && readCmdline(pid).includes(needle) && running(pid));
}

/** Running (a zombie waiting to be reaped holds nothing and counts as gone). */
export function running(pid: number): boolean {
  const st = readProcStat(pid);
  return st !== undefined && !hasEnded(st.state);
}

/** The parent of a running process (from /proc), or null once it is gone. */
export function parentOf(pid: number): number | null {
  return readProcStat(pid)?.ppid ?? null;
}

/** `root` and its descendants, from /proc. */
export function treeOf(root: number): number[] {
  const parent = new Map<number, number>();
  for (const pid of listPids()) {
    const st = readProcStat(pid);
    if (st) parent.set(pid, st.ppid);
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const [pid, ppid] of parent) if (ppid === out[i]) out.push(pid);
  return out.filter((p) => parent.has(p));
}

/** Is `pid` a descendant of `ancestor` (walking ppid in /proc)? */
export function descendsFrom(pid: number, ancestor: number): boolean {
  for (let p: number | undefined = pid, hops = 0; p !== undefined && p > 1 && hops < 64; hops++) {
    if (p === ancestor) return true;
    p = readProcStat(p)?.ppid;
  }
  return false;
}

/** The tool a script names for "run a shell command" in each agent, with its arguments. */
export function shellTool(agent: RealAgent, command: string, extra: Record<string, unknown> = {}): { tool: string; args: Record<string, unknown> } {
  switch (agent) {
    case 'codex':
      return { tool: 'exec_command', args: { cmd: command, yield_time_ms: 1000, ...extra } };
    case 'claude-code':
      return { tool: 'Bash', args: { command, description: 'run the test command', ...extra } };
    case 'gemini':
      return { tool: 'run_shell_command', args: { command, description: 'run the test command', ...extra } };
  }
}
