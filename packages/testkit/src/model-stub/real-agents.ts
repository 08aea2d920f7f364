import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/*
 * The published agents pinned by the agents-e2e workspace (installed by `npm ci` at the repo root,
 * never in the production image), registered as a KANDEV_AGENT_CATALOGUE file exactly as
 * docs/agents.md tells a user to, and pointed at the local model stub. Shared by agents-e2e and the
 * bench; testkit itself does not depend on the agents, it only finds them.
 */

export interface RealAgentBins {
  /** `codex` as npm installs it: a Node launcher for the native binary inside the package. */
  codex: string;
  claudeCodeAcp: string;
  gemini: string;
}

export const REAL_AGENTS = ['codex', 'claude-code', 'gemini'] as const;
export type RealAgent = (typeof REAL_AGENTS)[number];

/** The model Codex is told it talks to: a row of pricing.ts, so usage gets a cost. */
export const CODEX_MODEL = 'gpt-5';
/** A model with no row in pricing.ts (catalogue entry `codex-unpriced`): usage is recorded unpriced. */
export const UNPRICED_MODEL = 'kandev-stub-model';

/** Where the installed agents are; undefined when they are not installed (e.g. the production image). */
export function findRealAgents(): RealAgentBins | undefined {
  const require = createRequire(import.meta.url);
  try {
    const codex = join(dirname(require.resolve('@openai/codex/package.json')), 'bin/codex.js');
    const claudeCodeAcp = join(dirname(require.resolve('@zed-industries/claude-code-acp/package.json')), 'dist/index.js');
    const gemini = join(dirname(require.resolve('@google/gemini-cli/package.json')), 'bundle/gemini.js');
    return [codex, claudeCodeAcp, gemini].every((p) => existsSync(p)) ? { codex, claudeCodeAcp, gemini } : undefined;
  } catch {
    return undefined;
  }
}

/** Codex's `-c` overrides that make the stub its model provider (OpenAI Responses API). */
export function codexProviderArgs(stubUrl: string, model = CODEX_MODEL): string[] {
  return [
    '-c', 'model_provider="kandev-stub"',
    '-c', 'model_providers.kandev-stub.name="kandev stub"',
    '-c', `model_providers.kandev-stub.base_url="${stubUrl}/v1"`,
    '-c', 'model_providers.kandev-stub.wire_api="responses"',
    '-c', `model="${model}"`,
  ];
}

/**
 * Writes `<dir>/catalogue.json` and the agents' homes under `dir`. Names: `codex` and
 * `claude-code` run commands unasked; `codex-asks` and `claude-code-asks` ask for approval first;
 * `codex-unpriced` names a model without a price.
 */
export function writeRealAgentCatalogue(bins: RealAgentBins, stubUrl: string, dir: string): string {
  // A home of the agents' own: their shells do not run the machine's profile scripts.
  const home = join(dir, 'home');
  const codexHome = join(dir, 'codex-home');
  // Claude Code reads settings.json in CLAUDE_CONFIG_DIR. kandev's MCP tools are allowed in both (else
  // Claude Code asks before each call); one config lets Bash run unasked, the other asks.
  const claudeAllow = join(dir, 'claude-allow');
  const claudeAsk = join(dir, 'claude-ask');
  for (const d of [home, codexHome, claudeAllow, claudeAsk]) mkdirSync(d, { recursive: true });
  writeFileSync(join(claudeAllow, 'settings.json'), JSON.stringify({ permissions: { allow: ['mcp__kandev', 'Bash'] } }));
  writeFileSync(join(claudeAsk, 'settings.json'), JSON.stringify({ permissions: { allow: ['mcp__kandev'] } }));
  const claudeEnv = (configDir: string) => ({
    HOME: home,
    ANTHROPIC_BASE_URL: stubUrl,
    ANTHROPIC_API_KEY: 'stub-key',
    CLAUDE_CONFIG_DIR: configDir,
    // As root: claude-code-acp offers bypass mode when IS_SANDBOX has any value, and the Claude Code
    // CLI then refuses to start as root unless it is exactly "1" (an inherited "yes" breaks session/new).
    IS_SANDBOX: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
  });
  const codexEnv = { HOME: home, CODEX_HOME: codexHome };
  // Gemini CLI: an API key and GOOGLE_GEMINI_BASE_URL, no Google sign-in. Its settings live in
  // HOME/.gemini: without folder trust settled, it treats the workspace as untrusted and falls back
  // from --approval-mode yolo to "default" (every shell command then asks).
  const geminiEnv = { HOME: home, GEMINI_API_KEY: 'stub-key', GOOGLE_GEMINI_BASE_URL: stubUrl };
  mkdirSync(join(home, '.gemini'), { recursive: true });
  writeFileSync(join(home, '.gemini', 'settings.json'), JSON.stringify({ security: { folderTrust: { enabled: false } } }));
  const catalogue = {
    codex: { protocol: 'codex', command: bins.codex, args: ['app-server', ...codexProviderArgs(stubUrl), '-c', 'approval_policy="never"', '-c', 'sandbox_mode="danger-full-access"'], env: codexEnv },
    'codex-asks': { protocol: 'codex', command: bins.codex, args: ['app-server', ...codexProviderArgs(stubUrl), '-c', 'approval_policy="on-request"'], env: codexEnv },
    'codex-unpriced': { protocol: 'codex', command: bins.codex, args: ['app-server', ...codexProviderArgs(stubUrl, UNPRICED_MODEL), '-c', 'approval_policy="never"'], env: codexEnv },
    'claude-code': { protocol: 'acp', command: bins.claudeCodeAcp, args: [], env: claudeEnv(claudeAllow) },
    'claude-code-asks': { protocol: 'acp', command: bins.claudeCodeAcp, args: [], env: claudeEnv(claudeAsk) },
    gemini: { protocol: 'acp', command: bins.gemini, args: ['--acp', '--approval-mode', 'yolo'], env: geminiEnv },
    'gemini-asks': { protocol: 'acp', command: bins.gemini, args: ['--acp', '--approval-mode', 'default'], env: geminiEnv },
  };
  const file = join(dir, 'catalogue.json');
  writeFileSync(file, JSON.stringify(catalogue, null, 2));
  // Where lifecycle is root, agentctl and the agents run under uids of their own: they read
  // the catalogue and settings and write into these shared homes, which belong to the test.
  chmodSync(dir, 0o711);
  for (const d of [home, codexHome, claudeAllow, claudeAsk, join(home, '.gemini')]) chmodSync(d, 0o777);
  for (const f of [file, join(claudeAllow, 'settings.json'), join(claudeAsk, 'settings.json'), join(home, '.gemini', 'settings.json')]) chmodSync(f, 0o644);
  return file;
}
