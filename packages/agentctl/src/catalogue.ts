import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { delimiter, dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentctlProtocol } from '@kandev/contracts/agentctl';
import { staleBundle } from '@kandev/runtime/bundle';
import { z } from 'zod';

/*
 * Which program an agent name launches, and which protocol it speaks. The scripted test doubles are
 * present wherever @kandev/testkit is installed (see scriptedAgentPath); real agents appear when
 * their command is on PATH; KANDEV_AGENT_CATALOGUE (a JSON file) adds or overrides entries.
 */

export interface AgentSpec {
  name: string;
  protocol: AgentctlProtocol;
  command: string;
  args: string[];
  env: Record<string, string>;
  /** Read-only settings lifecycle copies into each execution's own home before the agent starts (docs/agents.md). */
  settings_from?: SettingsFrom;
}

export const CATALOGUE_ENV = 'KANDEV_AGENT_CATALOGUE';

/**
 * `home_path` split into its components: relative to the execution's HOME, plain names only, so
 * the copy can walk it by descriptor and never leave the home. `.` (or an empty path) is HOME
 * itself. A string is the reason it is refused.
 */
export function homePathParts(homePath: string): string[] | string {
  if (homePath.startsWith('/')) return "must be relative to the execution's HOME, not absolute";
  const parts = homePath.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.some((p) => p === '..')) return 'must stay inside the execution\'s HOME (no "..")';
  if (parts.some((p) => p.includes('\0'))) return 'must not contain NUL';
  return parts;
}

/**
 * Settings an agent reads from its home (Codex's `~/.codex`, Claude Code's `~/.claude`, Gemini's
 * `~/.gemini`). `source` is a directory whose contents are copied, or files (one path or a list)
 * copied by their own names, into `HOME/<home_path>`. Lifecycle makes the copy for each execution,
 * because under root each one has a uid and a home of its own and cannot share a directory with
 * the next (docs/agents.md, "Settings").
 */
export const SettingsFrom = z
  .object({
    source: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]),
    home_path: z.string().superRefine((v, ctx) => {
      const parts = homePathParts(v);
      if (typeof parts === 'string') ctx.addIssue({ code: 'custom', message: `home_path ${parts}` });
    }),
  })
  .strict();
export type SettingsFrom = z.infer<typeof SettingsFrom>;

const CatalogueEntry = z.object({
  protocol: AgentctlProtocol,
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).default({}),
  settings_from: SettingsFrom.optional(),
});
export const CatalogueFile = z.record(z.string().min(1), CatalogueEntry);
export type CatalogueFile = z.infer<typeof CatalogueFile>;

export class CatalogueError extends Error {}

/** Real agents, listed only when their command is installed. */
const installable: ReadonlyArray<Omit<AgentSpec, 'env'>> = [
  { name: 'claude-code-acp', protocol: 'acp', command: 'claude-code-acp', args: [] },
  { name: 'codex', protocol: 'codex', command: 'codex', args: ['app-server'] },
  { name: 'gemini', protocol: 'acp', command: 'gemini', args: ['--experimental-acp'] },
  { name: 'auggie', protocol: 'acp', command: 'auggie', args: ['--acp'] },
];

/**
 * Path of a scripted agent's bundle (scripts/bundle.mjs, ADR 0052), or undefined when @kandev/testkit is not installed. The test
 * doubles live in testkit, a development dependency: a checkout of the repository has it (the
 * workspace link, or the sibling directory when the link is missing), a production image does not,
 * and its catalogue simply lists no scripted agents (docs/agents.md, "Scripted agents"). Resolved
 * when the catalogue is read, never imported, so agentctl and lifecycle start without testkit.
 */
export function scriptedAgentPath(agent: 'scripted-acp' | 'scripted-codex'): string | undefined {
  try {
    return fileURLToPath(import.meta.resolve(`@kandev/testkit/agents/${agent}.bundle`));
  } catch {
    // Not resolvable: no workspace link, or testkit not built (the export's file is missing).
  }
  const testkit = new URL('../../testkit/', import.meta.url);
  return existsSync(new URL('package.json', testkit)) ? fileURLToPath(new URL(`dist/agents/${agent}.bundle.js`, testkit)) : undefined;
}

export function isOnPath(command: string, env: NodeJS.ProcessEnv = process.env): boolean {
  if (command.includes('/')) return isExecutable(command);
  return (env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && isExecutable(join(dir, command)));
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function loadCatalogue(env: NodeJS.ProcessEnv = process.env): Map<string, AgentSpec> {
  const catalogue = new Map<string, AgentSpec>();
  for (const agent of ['scripted-acp', 'scripted-codex'] as const) {
    const script = scriptedAgentPath(agent);
    // Present whenever testkit is (a repository checkout, where tests and `npm start` rely on them),
    // even unbuilt: resolveAgent then says to build rather than "unknown agent".
    if (script) catalogue.set(agent, { name: agent, protocol: agent === 'scripted-acp' ? 'acp' : 'codex', command: process.execPath, args: [script], env: {} });
  }
  for (const entry of installable) {
    if (isOnPath(entry.command, env)) catalogue.set(entry.name, { ...entry, args: [...entry.args], env: {} });
  }
  const file = env[CATALOGUE_ENV];
  if (file) {
    for (const [name, entry] of Object.entries(readCatalogueFile(file))) {
      catalogue.set(name, { name, ...entry });
    }
  }
  return catalogue;
}

function readCatalogueFile(file: string): CatalogueFile {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new CatalogueError(`cannot read ${CATALOGUE_ENV} file ${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const parsed = CatalogueFile.safeParse(raw);
  if (!parsed.success) throw new CatalogueError(`invalid ${CATALOGUE_ENV} file ${file}: ${z.prettifyError(parsed.error)}`);
  // A relative command path is relative to the catalogue file, so a catalogue can ship with its agents.
  const base = dirname(resolve(file));
  const relative = (p: string) => p.startsWith('./') || p.startsWith('../');
  for (const [name, entry] of Object.entries(parsed.data)) {
    if (relative(entry.command)) entry.command = resolve(base, entry.command);
    const from = entry.settings_from;
    if (!from) continue;
    // Settings sources, like commands, may ship beside the catalogue; anything else must be absolute,
    // since lifecycle and agentctl do not share a working directory.
    const sources = (Array.isArray(from.source) ? from.source : [from.source]).map((p) => (relative(p) ? resolve(base, p) : p));
    const loose = sources.find((p) => !isAbsolute(p));
    if (loose)
      throw new CatalogueError(`invalid ${CATALOGUE_ENV} file ${file}: agent "${name}": settings_from source ${loose} must be absolute or start with ./`);
    from.source = Array.isArray(from.source) ? sources : sources[0]!;
  }
  return parsed.data;
}

export function resolveAgent(name: string, env: NodeJS.ProcessEnv = process.env): AgentSpec {
  const catalogue = loadCatalogue(env);
  const spec = catalogue.get(name);
  if (!spec) throw new CatalogueError(`unknown agent "${name}"; known: ${[...catalogue.keys()].sort().join(', ')}`);
  const script = spec.command === process.execPath ? spec.args[0] : undefined;
  if (script && isAbsolute(script) && !existsSync(script)) {
    throw new CatalogueError(`agent "${name}" is not built: ${script} is missing (run \`npm run build\`)`);
  }
  // A scripted agent older than its build would run an earlier script's semantics.
  const stale = script?.endsWith('.bundle.js') ? staleBundle(script) : undefined;
  if (stale) throw new CatalogueError(`agent "${name}" is out of date: ${stale} (run \`npm run build\`)`);
  return spec;
}
