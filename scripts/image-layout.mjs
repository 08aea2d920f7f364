#!/usr/bin/env node
// `node scripts/image-layout.mjs <dir>`: lays out in <dir> what the control plane's image runs, from a
// built checkout (`npm run build`); the image's build stage runs it for /app (deploy/docker/Dockerfile,
// ADR 0053), and e2e/test/image-layout.test.ts runs a whole stack from such a directory.
//
// What runs is the bundles (ADR 0052): each service, lifecycle's drain command and agentctl are one file
// each with their dependencies inside, plus lazy chunks beside them. So the layout has no
// node_modules of third parties, only:
// - each package's package.json (a service reads its version from it; `"type": "module"`) and its dist/
//   without the type declarations, source maps and build info. The bundles run; tsc's modules beside
//   them are what each bundle was made from, which `freshBundle` checks before lifecycle spawns agentctl;
// - the services' migrations;
// - node_modules/@kandev/agentctl, the workspace link through which lifecycle finds agentctl's bundle
//   (`import.meta.resolve('@kandev/agentctl/agentctl.bundle')`, AGENTCTL_BIN's default).
// Not the test kit: the scripted agents are test doubles (docs/agents.md).
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PACKAGES = ['packages/contracts', 'packages/runtime', 'packages/agentctl', ...readdirSync(join(ROOT, 'services')).map((s) => `services/${s}`)];
/**
 * Files of dist/ that nothing runs or reads at run time.
 * @param {string} name
 */
const notRun = (name) => name.endsWith('.d.ts') || name.endsWith('.map') || name.endsWith('.tsbuildinfo');

const out = process.argv[2];
if (!out) {
  console.error('usage: node scripts/image-layout.mjs <dir>');
  process.exit(2);
}
const dir = resolve(out);
const missing = PACKAGES.filter((p) => !existsSync(join(ROOT, p, 'dist')));
if (missing.length) {
  console.error(`[image-layout] not built: ${missing.join(', ')}; run \`npm run build\` first`);
  process.exit(1);
}

mkdirSync(dir, { recursive: true });
cpSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
for (const p of PACKAGES) {
  const from = join(ROOT, p);
  const to = join(dir, p);
  rmSync(to, { recursive: true, force: true });
  mkdirSync(to, { recursive: true });
  cpSync(join(from, 'package.json'), join(to, 'package.json'));
  // Timestamps kept: a bundle counts as fresh only while no module it was made from is newer.
  cpSync(join(from, 'dist'), join(to, 'dist'), { recursive: true, preserveTimestamps: true, filter: (src) => !notRun(basename(src)) });
  if (existsSync(join(from, 'migrations'))) cpSync(join(from, 'migrations'), join(to, 'migrations'), { recursive: true });
}
const link = join(dir, 'node_modules/@kandev/agentctl');
rmSync(link, { force: true });
mkdirSync(join(dir, 'node_modules/@kandev'), { recursive: true });
symlinkSync('../../packages/agentctl', link);
console.log(`[image-layout] ${dir}: ${PACKAGES.length} packages, their bundles and what those were made from; no third-party node_modules`);
