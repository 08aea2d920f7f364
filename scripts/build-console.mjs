#!/usr/bin/env node
// Builds the operator console (services/gateway/console → services/gateway/dist/console, served at
// /ui/). Part of `npm run build` and of `npm start`'s build (ADR 0028): typecheck, then Vite.
// Skipped when the output is newer than every source file (pass --force to rebuild anyway).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = fileURLToPath(new URL('../services/gateway/console/', import.meta.url));
const OUT = fileURLToPath(new URL('../services/gateway/dist/console/index.html', import.meta.url));

/** @param {string} dir */
function newest(dir) {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

if (!process.argv.includes('--force') && existsSync(OUT) && statSync(OUT).mtimeMs > newest(SRC)) process.exit(0);

const require = createRequire(import.meta.url);
const tsc = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', join(SRC, 'tsconfig.json')], { stdio: 'inherit' });
if (tsc.status !== 0) {
  console.error('[console] typecheck failed');
  process.exit(1);
}
const { build } = await import('vite');
await build({ configFile: join(SRC, 'vite.config.ts') });
console.log('[console] built services/gateway/dist/console');
