import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * The published agents pinned by agents-e2e (installed into agents-e2e/node_modules from its own
 * lockfile by agents-e2e/install.mjs, never by the root's `npm ci`, never in the production image),
 * registered as a KANDEV_AGENT_CATALOGUE file exactly as docs/agents.md tells a user to, and pointed
 * at the local model stub. Shared by agents-e2e and the bench; testkit itself does not depend on the
 * agents, it only finds them.
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

/** The repository's agents-e2e directory (from src/model-stub/ or dist/model-stub/ of this package). */
export const AGENTS_E2E_DIR = fileURLToPath(new URL('../../../../agents-e2e/', import.meta.url));

/**
 * Where the installed agents are, in `dir`'s own node_modules (not wherever Node would find a
 * package of that name); undefined when they are not installed there (e.g. the production image).
 */
export function findRealAgents(dir = AGENTS_E2E_DIR): RealAgentBins | undefined {
  const inPackage = (name: string, file: string) => join(dir, 'node_modules', name, file);
  const bins = {
    codex: inPackage('@openai/codex', 'bin/codex.js'),
    claudeCodeAcp: inPackage('@zed-industries/claude-code-acp', 'dist/index.js'),
    gemini: inPackage('@google/gemini-cli', 'bundle/gemini.js'),
  };
  return Object.values(bins).every((p) => existsSync(p)) ? bins : undefined;
}

/** Codex's `-c` overrides that make the stub its model provider (OpenAI Responses API). */
export function codexProviderArgs(stubUrl: string, model = CODEX_MODEL): string[] {
  return [
    '-c',
    'model_provider="kandev-stub"',
    '-c',
    'model_providers.kandev-stub.name="kandev stub"',
    '-c',
    `model_providers.kandev-stub.base_url="${stubUrl}/v1"`,
    '-c',
    'model_providers.kandev-stub.wire_api="responses"',
    '-c',
    `model="${model}"`,
  ];
}

/**
 * Writes `<dir>/catalogue.json` and the agents' settings under `dir`. Names: `codex` and
 * `claude-code` run commands unasked; `codex-asks` and `claude-code-asks` ask for approval first;
 * `codex-unpriced` names a model without a price.
 */
export function writeRealAgentCatalogue(bins: RealAgentBins, stubUrl: string, dir: string): string {
  // Each agent's settings are named by its entry (`settings_from`, docs/agents.md "Settings") and
  // lifecycle copies them into each execution's own home, where the agents' docs say they live
  // (~/.codex, ~/.claude, ~/.gemini): where lifecycle is root every execution runs under a uid of its
  // own, so a settings directory shared by executions would hold files one uid wrote and the
  // next cannot read. An entry with settings also gets its task's home where agents share
  // lifecycle's uid, so a run as a normal user never touches that user's own settings.
  const seeds = join(dir, 'seeds');
  const seed = (name: string, files: Record<string, unknown>) => {
    const root = join(seeds, name);
    mkdirSync(root, { recursive: true });
    for (const [path, content] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), typeof content === 'string' ? content : JSON.stringify(content));
    }
    return root;
  };
  // Claude Code reads settings.json in its config directory (~/.claude). kandev's MCP tools are
  // allowed in both (else Claude Code asks before each call); one config lets Bash run unasked, the other asks.
  const claudeAllow = { source: seed('claude-allow', { 'settings.json': { permissions: { allow: ['mcp__kandev', 'Bash'] } } }), home_path: '.claude' };
  const claudeAsk = { source: seed('claude-ask', { 'settings.json': { permissions: { allow: ['mcp__kandev'] } } }), home_path: '.claude' };
  // Gemini CLI keeps its settings in HOME/.gemini: without folder trust settled, it treats the
  // workspace as untrusted and falls back from --approval-mode yolo to "default" (every shell command then asks).
  // Usage statistics and update checks are off: tests run offline, and neither may reach Google from a CI machine.
  const gemini = {
    source: seed('gemini', {
      'settings.json': {
        security: { folderTrust: { enabled: false } },
        privacy: { usageStatisticsEnabled: false },
        general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
      },
    }),
    home_path: '.gemini',
  };
  // Codex is configured by `-c` (codexProviderArgs); its home gets a config.toml of its own all the same.
  const codex = { source: seed('codex', { 'config.toml': '# kandev agents-e2e: settings come as -c overrides\n' }), home_path: '.codex' };
  const claudeEnv = {
    ANTHROPIC_BASE_URL: stubUrl,
    ANTHROPIC_API_KEY: 'stub-key',
    // As root: claude-code-acp offers bypass mode when IS_SANDBOX has any value, and the Claude Code
    // CLI then refuses to start as root unless it is exactly "1" (an inherited "yes" breaks session/new).
    IS_SANDBOX: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
  };
  // Gemini CLI: an API key and GOOGLE_GEMINI_BASE_URL, no Google sign-in.
  const geminiEnv = { GEMINI_API_KEY: 'stub-key', GOOGLE_GEMINI_BASE_URL: stubUrl };
  const run = (bin: string, args: string[]) => ({ command: bin, args });
  const catalogue = {
    codex: {
      protocol: 'codex',
      ...run(bins.codex, ['app-server', ...codexProviderArgs(stubUrl), '-c', 'approval_policy="never"', '-c', 'sandbox_mode="danger-full-access"']),
      settings_from: codex,
    },
    'codex-asks': {
      protocol: 'codex',
      ...run(bins.codex, ['app-server', ...codexProviderArgs(stubUrl), '-c', 'approval_policy="on-request"']),
      settings_from: codex,
    },
    'codex-unpriced': {
      protocol: 'codex',
      ...run(bins.codex, ['app-server', ...codexProviderArgs(stubUrl, UNPRICED_MODEL), '-c', 'approval_policy="never"']),
      settings_from: codex,
    },
    'claude-code': { protocol: 'acp', ...run(bins.claudeCodeAcp, []), env: claudeEnv, settings_from: claudeAllow },
    'claude-code-asks': { protocol: 'acp', ...run(bins.claudeCodeAcp, []), env: claudeEnv, settings_from: claudeAsk },
    gemini: { protocol: 'acp', ...run(bins.gemini, ['--acp', '--approval-mode', 'yolo']), env: geminiEnv, settings_from: gemini },
    'gemini-asks': { protocol: 'acp', ...run(bins.gemini, ['--acp', '--approval-mode', 'default']), env: geminiEnv, settings_from: gemini },
  };
  const file = join(dir, 'catalogue.json');
  writeFileSync(file, JSON.stringify(catalogue, null, 2));
  // agentctl reads the catalogue under each execution's uid; the seeds are read by lifecycle (root
  // where agents have uids of their own), so they stay private to this run.
  chmodSync(dir, 0o711);
  chmodSync(file, 0o644);
  chmodSync(seeds, 0o700);
  return file;
}
