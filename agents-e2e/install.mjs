#!/usr/bin/env node
// Installs the published agents this directory pins (package.json, package-lock.json) into its own
// node_modules when they are missing, or were installed from another lockfile. agents-e2e is not a
// workspace of the repository, so the root's `npm ci` leaves the agents out (Codex CLI alone is
// about 400 MB): only whoever runs these tests pays for them. Run by this directory's `npm test`,
// and by scripts/test.mjs as its test lanes start, so the agents-e2e phase finds them installed.
//
// The install is `npm ci` from the committed lockfile (the npm registry only, no other network),
// then a stamp with the lockfile's hash: a later run with the same lockfile and the pinned packages
// on disk installs nothing.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = fileURLToPath(new URL('.', import.meta.url));
const stamp = join(dir, 'node_modules', '.kandev-installed-lock');
const lockText = readFileSync(join(dir, 'package-lock.json'), 'utf8');
const lockHash = createHash('sha256').update(lockText).digest('hex');
const pins = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).dependencies;

/** The pinned packages on disk at their pinned versions, installed from this very lockfile. */
function installed() {
  if (!existsSync(stamp) || readFileSync(stamp, 'utf8').trim() !== lockHash) return false;
  return Object.entries(pins).every(([name, version]) => {
    const manifest = join(dir, 'node_modules', name, 'package.json');
    return existsSync(manifest) && JSON.parse(readFileSync(manifest, 'utf8')).version === version;
  });
}

if (installed()) {
  console.log('agents-e2e: the published agents are installed');
} else {
  const started = Date.now();
  console.log('agents-e2e: installing the published agents (npm ci in agents-e2e/)');
  // --prefix: this directory is the project, whatever npm's environment (npm test at the root sets
  // npm_config_* for the root) says.
  const npm = spawn('npm', ['ci', '--prefix', dir, '--no-audit', '--no-fund', '--loglevel=error'], { stdio: 'inherit', env: withoutNpmScriptEnv() });
  const [code, signal] = await once(npm, 'exit');
  const missing = Object.keys(pins).filter((name) => !existsSync(join(dir, 'node_modules', name, 'package.json')));
  if (code !== 0 || missing.length) {
    console.error(
      `agents-e2e: npm ci ${code === 0 ? `left out ${missing.join(', ')}` : `failed (${signal ?? `exit ${code}`})`}; the agent tests need the npm registry once`,
    );
    process.exit(1);
  }
  writeFileSync(stamp, `${lockHash}\n`);
  console.log(`agents-e2e: installed the published agents in ${Math.round((Date.now() - started) / 1000)} s`);
}

/** The environment without what a running npm script inherits about its own project. */
function withoutNpmScriptEnv() {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_(config_(local_)?prefix|package_)/i.test(k)));
}
