import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BaseEnv } from '@kandev/runtime';
import { AGENTCTL_ENV, CATALOGUE_ENV } from '@kandev/agentctl';
import { GatewayEnv } from '@kandev/gateway/env';
import { HoldsEnv } from '@kandev/holds/env';
import { LifecycleEnv } from '@kandev/lifecycle/env';
import { McpEnv } from '@kandev/mcp/env';
import { OrchestratorEnv } from '@kandev/orchestrator/env';

// Every environment variable a service or agentctl reads is in docs/operations.md: the names in the
// first column of its tables. Pure (no stack): reads the env schemas and the sources.
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

function documented(): Set<string> {
  const names = new Set<string>();
  for (const line of readFileSync(join(root, 'docs', 'operations.md'), 'utf8').split('\n')) {
    const first = line.startsWith('|') ? line.split('|')[1] : undefined;
    for (const m of first?.matchAll(/`([A-Z][A-Z0-9_]+)`/g) ?? []) names.add(m[1]!);
  }
  return names;
}

/** `process.env.NAME` / `process.env['NAME']` read directly in the shipped sources. */
function readDirectly(): Map<string, string> {
  const found = new Map<string, string>();
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith('.ts'))
        for (const m of readFileSync(path, 'utf8').matchAll(/process\.env(?:\.([A-Z][A-Z0-9_]+)|\[['"]([A-Z][A-Z0-9_]+)['"]\])/g))
          found.set(m[1] ?? m[2]!, path.slice(root.length + 1));
    }
  };
  for (const base of ['services', 'packages'])
    for (const pkg of readdirSync(join(root, base))) {
      if (pkg === 'testkit') continue; // test code: its variables are the tests' own
      const src = join(root, base, pkg, 'src');
      if (statSync(join(root, base, pkg)).isDirectory() && readdirSync(join(root, base, pkg)).includes('src')) walk(src);
    }
  return found;
}

describe('docs/operations.md documents every environment variable', () => {
  it('each variable of the services’ env schemas, agentctl’s configuration and direct reads', () => {
    const read = new Map<string, string>();
    const schemas = { BaseEnv, GatewayEnv, HoldsEnv, LifecycleEnv, McpEnv, OrchestratorEnv };
    for (const [schema, s] of Object.entries(schemas)) for (const name of Object.keys(s.shape)) read.set(name, schema);
    for (const name of AGENTCTL_ENV) read.set(name, 'agentctl config');
    read.set(CATALOGUE_ENV, 'agentctl catalogue');
    // The operating system's own variables (a home, a temp dir, a search path) configure nothing of ours.
    const system = new Set(['HOME', 'TMPDIR', 'PATH', 'USER', 'LOGNAME', 'SHELL', 'LANG', 'TZ', 'TERM', 'NODE_ENV']);
    for (const [name, file] of readDirectly()) if (!system.has(name)) read.set(name, file);
    expect(read.size).toBeGreaterThan(40); // the schemas were read, not an empty set

    const docs = documented();
    const missing = [...read].filter(([name]) => !docs.has(name)).map(([name, where]) => `${name} (${where})`);
    expect(missing, 'read by the code but not in a table of docs/operations.md').toEqual([]);
  });
});
