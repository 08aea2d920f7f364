import { chmodSync, existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
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
 * Writes `<dir>/catalogue.json` and the agents' homes under `dir`. Names: `codex` and
 * `claude-code` run commands unasked; `codex-asks` and `claude-code-asks` ask for approval first;
 * `codex-unpriced` names a model without a price.
 */
export function writeRealAgentCatalogue(bins: RealAgentBins, stubUrl: string, dir: string): string {
  // Each execution's agent gets a home of its own inside its task's directory, seeded with the
  // test's settings (agent-home.sh): where lifecycle is root, every execution runs under a uid of
  // its own, so a home shared by executions would hold files one uid wrote and the next
  // cannot read, and a home of the machine's would run its profile scripts.
  const seeds = join(dir, 'seeds');
  const seed = (name: string, files: Record<string, unknown>) => {
    const root = join(seeds, name);
    mkdirSync(root, { recursive: true });
    for (const [path, content] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), JSON.stringify(content));
    }
    return root;
  };
  // Claude Code reads settings.json in CLAUDE_CONFIG_DIR. kandev's MCP tools are allowed in both (else
  // Claude Code asks before each call); one config lets Bash run unasked, the other asks.
  const claudeAllow = seed('claude-allow', { '.claude-config/settings.json': { permissions: { allow: ['mcp__kandev', 'Bash'] } } });
  const claudeAsk = seed('claude-ask', { '.claude-config/settings.json': { permissions: { allow: ['mcp__kandev'] } } });
  // Gemini CLI keeps its settings in HOME/.gemini: without folder trust settled, it treats the
  // workspace as untrusted and falls back from --approval-mode yolo to "default" (every shell command then asks).
  // Usage statistics and update checks are off: tests run offline, and neither may reach Google from a CI machine.
  const gemini = seed('gemini', {
    '.gemini/settings.json': {
      security: { folderTrust: { enabled: false } },
      privacy: { usageStatisticsEnabled: false },
      general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
    },
  });
  const codex = seed('codex', {});
  const wrapper = join(dir, 'agent-home.sh');
  writeFileSync(
    wrapper,
    [
      '#!/bin/sh',
      '# Usage: agent-home.sh <agent binary> [args...]; AGENT_HOME_SEED names the settings to copy in.',
      'set -e',
      'HOME="$(pwd -P)/.agent-home"',
      'export HOME CODEX_HOME="$HOME/.codex" CLAUDE_CONFIG_DIR="$HOME/.claude-config"',
      'mkdir -p "$HOME" "$CODEX_HOME" "$CLAUDE_CONFIG_DIR"',
      'cp -R "$AGENT_HOME_SEED/." "$HOME/"',
      'exec "$@"',
      '',
    ].join('\n'),
  );
  const claudeEnv = (configSeed: string) => ({
    AGENT_HOME_SEED: configSeed,
    ANTHROPIC_BASE_URL: stubUrl,
    ANTHROPIC_API_KEY: 'stub-key',
    // As root: claude-code-acp offers bypass mode when IS_SANDBOX has any value, and the Claude Code
    // CLI then refuses to start as root unless it is exactly "1" (an inherited "yes" breaks session/new).
    IS_SANDBOX: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
  });
  const codexEnv = { AGENT_HOME_SEED: codex };
  // Gemini CLI: an API key and GOOGLE_GEMINI_BASE_URL, no Google sign-in.
  const geminiEnv = { AGENT_HOME_SEED: gemini, GEMINI_API_KEY: 'stub-key', GOOGLE_GEMINI_BASE_URL: stubUrl };
  const run = (bin: string, args: string[]) => ({ command: wrapper, args: [bin, ...args] });
  const catalogue = {
    codex: {
      protocol: 'codex',
      ...run(bins.codex, ['app-server', ...codexProviderArgs(stubUrl), '-c', 'approval_policy="never"', '-c', 'sandbox_mode="danger-full-access"']),
      env: codexEnv,
    },
    'codex-asks': { protocol: 'codex', ...run(bins.codex, ['app-server', ...codexProviderArgs(stubUrl), '-c', 'approval_policy="on-request"']), env: codexEnv },
    'codex-unpriced': {
      protocol: 'codex',
      ...run(bins.codex, ['app-server', ...codexProviderArgs(stubUrl, UNPRICED_MODEL), '-c', 'approval_policy="never"']),
      env: codexEnv,
    },
    'claude-code': { protocol: 'acp', ...run(bins.claudeCodeAcp, []), env: claudeEnv(claudeAllow) },
    'claude-code-asks': { protocol: 'acp', ...run(bins.claudeCodeAcp, []), env: claudeEnv(claudeAsk) },
    gemini: { protocol: 'acp', ...run(bins.gemini, ['--acp', '--approval-mode', 'yolo']), env: geminiEnv },
    'gemini-asks': { protocol: 'acp', ...run(bins.gemini, ['--acp', '--approval-mode', 'default']), env: geminiEnv },
  };
  const file = join(dir, 'catalogue.json');
  writeFileSync(file, JSON.stringify(catalogue, null, 2));
  // Agents under uids of their own read the catalogue, the wrapper and the seeds, and write nothing here.
  chmodSync(dir, 0o711);
  chmodSync(wrapper, 0o755);
  chmodSync(file, 0o644);
  const open = (p: string) => {
    for (const e of readdirSync(p, { withFileTypes: true })) {
      const q = join(p, e.name);
      if (e.isDirectory()) open(q);
      chmodSync(q, e.isDirectory() ? 0o755 : 0o644);
    }
  };
  chmodSync(seeds, 0o755);
  open(seeds);
  return file;
}
