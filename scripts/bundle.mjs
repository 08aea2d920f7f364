#!/usr/bin/env node
// `node scripts/bundle.mjs [name...]`: bundles each program the system starts from tsc's output into
// one file beside it (ADR 0052): the five services (services/<name>/dist/<name>.bundle.js), lifecycle's
// drain command (services/lifecycle/dist/drain.bundle.js), agentctl
// (packages/agentctl/dist/agentctl.bundle.js, ADR 0051) and the scripted test agents
// (packages/testkit/dist/agents/<name>.bundle.js). A process that starts from a bundle skips most of
// Node's module loading (resolving, reading and linking a hundred or more files): a service starts
// with about half the CPU, agentctl and a scripted agent with a third less (docs/history/testing-measurements.md).
// Dynamic imports stay lazy, in chunks under dist/<name>-chunks/ (agentctl's protocol adapters, the
// tracing SDK), so a process still loads only what it uses. Not minified: stack traces keep their
// function names.
//
// Beside each bundle, <bundle>.inputs.json lists the repository's modules it was made from; whoever
// starts a bundle refuses one older than any of them (@kandev/runtime/bundle). This script makes a
// bundle again when one of those inputs, the lockfile or patches/ is newer (pass --force to make
// every bundle anyway). With names, only those (the image builds no test kit); without, all.
// Part of `npm run build` and `npm start`'s build, after `tsc -b`.
import { existsSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SERVICES = ['gateway', 'mcp', 'orchestrator', 'lifecycle', 'holds'];
const TARGETS = [
  ...SERVICES.map((name) => ({ name, dist: `services/${name}/dist`, entry: 'main.js' })),
  // The lifecycle pod's preStop command (services/lifecycle/dist/drain.bundle.js, ADR 0039, 0053).
  { name: 'drain', dist: 'services/lifecycle/dist', entry: 'drain.js' },
  { name: 'agentctl', dist: 'packages/agentctl/dist', entry: 'main.js' },
  { name: 'scripted-acp', dist: 'packages/testkit/dist/agents', entry: 'scripted-acp.js' },
  { name: 'scripted-codex', dist: 'packages/testkit/dist/agents', entry: 'scripted-codex.js' },
];

const force = process.argv.includes('--force');
const names = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const unknown = names.filter((n) => !TARGETS.some((t) => t.name === n));
if (unknown.length) {
  console.error(`[bundle] unknown: ${unknown.join(', ')}; known: ${TARGETS.map((t) => t.name).join(', ')}`);
  process.exit(2);
}

/** @param {string} path */
const mtime = (path) => (existsSync(path) ? statSync(path).mtimeMs : 0);
/**
 * Newest mtime under a directory (patches/), 0 if there is none.
 * @param {string} dir
 */
const newestIn = (dir) =>
  existsSync(dir) ? readdirSync(dir, { recursive: true, encoding: 'utf8' }).reduce((t, f) => Math.max(t, mtime(join(dir, f))), mtime(dir)) : 0;
// A dependency's code is in the bundle too, but npm gives its files the package's own dates: a
// change of dependencies shows as a newer lockfile (or patch) instead.
const dependenciesChanged = Math.max(
  mtime(join(ROOT, 'package-lock.json')),
  mtime(join(ROOT, 'node_modules/.package-lock.json')),
  newestIn(join(ROOT, 'patches')),
);

const { staleBundle, bundleInputsFile } = await import('@kandev/runtime/bundle').catch((e) => {
  console.error(`[bundle] cannot load @kandev/runtime/bundle (${e.message}): run \`tsc -b\` first`);
  process.exit(1);
});
const { build } = await import('rolldown');

let failed = false;
for (const t of TARGETS.filter((t) => names.length === 0 || names.includes(t.name))) {
  const dist = join(ROOT, t.dist);
  const entry = join(dist, t.entry);
  const bundle = join(dist, `${t.name}.bundle.js`);
  if (!existsSync(entry)) {
    console.error(`[bundle] ${relative(ROOT, entry)} is missing: run \`tsc -b\` first`);
    failed = true;
    continue;
  }
  if (!force && !staleBundle(bundle) && mtime(bundle) >= dependenciesChanged) continue;
  const chunks = `${t.name}-chunks`;
  rmSync(join(dist, chunks), { recursive: true, force: true });
  const { output } = await build({
    input: { [`${t.name}.bundle`]: entry },
    platform: 'node',
    output: { dir: dist, format: 'esm', entryFileNames: '[name].js', chunkFileNames: `${chunks}/[name]-[hash].js` },
    logLevel: 'warn',
  });
  // The repository's own modules (workspace packages resolve to their real paths, not node_modules links).
  const inputs = new Set();
  for (const chunk of output) {
    for (const id of chunk.type === 'chunk' ? chunk.moduleIds : []) {
      if (id.startsWith(ROOT) && !id.includes('/node_modules/')) inputs.add(relative(dirname(bundle), id));
    }
  }
  writeFileSync(bundleInputsFile(bundle), `${JSON.stringify({ inputs: [...inputs].sort() }, null, 1)}\n`);
  console.log(`[bundle] ${relative(ROOT, bundle)} (${inputs.size} modules of this repository)`);
}
process.exit(failed ? 1 : 0);
