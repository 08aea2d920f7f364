#!/usr/bin/env node
// Bundles agentctl (packages/agentctl/dist/main.js, tsc's output) into one file,
// packages/agentctl/dist/agentctl.bundle.js, which the lifecycle spawns once per execution (ADR 0051).
// A process that starts from a bundle skips most of Node's module loading (resolving, reading and
// linking about a hundred files of agentctl, contracts, zod and the protocol SDK): about a fifth of
// a launch's CPU (bench/LAUNCH-FLOOR.md). The protocol adapters and the tracing SDK stay dynamic
// imports, in chunks under dist/agentctl-chunks/, so an execution loads only what it uses.
// Part of `npm run build` and `npm start`'s build, after `tsc -b`; skipped when the bundle is newer
// than every file of dist/ it is built from (pass --force to rebuild anyway).
import { existsSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const DIST = fileURLToPath(new URL('../packages/agentctl/dist/', import.meta.url));
const ENTRY = 'agentctl.bundle.js';
const CHUNKS = 'agentctl-chunks';

/** Newest mtime of tsc's output (the bundle and its chunks excluded). */
function newest(dir) {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === ENTRY || e.name === CHUNKS) continue;
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

const out = join(DIST, ENTRY);
if (!existsSync(join(DIST, 'main.js'))) {
  console.error('[agentctl] packages/agentctl/dist/main.js is missing: run `tsc -b` first');
  process.exit(1);
}
if (!process.argv.includes('--force') && existsSync(out) && statSync(out).mtimeMs > newest(DIST)) process.exit(0);

rmSync(join(DIST, CHUNKS), { recursive: true, force: true });
const { build } = await import('rolldown');
await build({
  input: { [ENTRY.replace(/\.js$/, '')]: join(DIST, 'main.js') },
  platform: 'node',
  // Not minified: stack traces in agentctl's logs keep their function names.
  output: { dir: DIST, format: 'esm', entryFileNames: '[name].js', chunkFileNames: `${CHUNKS}/[name]-[hash].js` },
  logLevel: 'warn',
});
console.log('[agentctl] bundled packages/agentctl/dist/agentctl.bundle.js');
