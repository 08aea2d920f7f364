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
}

export const CATALOGUE_ENV = 'KANDEV_AGENT_CATALOGUE';

const CatalogueEntry = z.object({
  protocol: AgentctlProtocol,
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).default({}),
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
  for (const entry of Object.values(parsed.data)) {
    if (entry.command.startsWith('./') || entry.command.startsWith('../')) entry.command = resolve(base, entry.command);
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
