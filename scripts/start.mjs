#!/usr/bin/env node
// `npm start`: build, then the whole control plane on this machine (see docs/operations.md).
//
// package.json runs this as `exec node scripts/start.mjs`: npm's shell is replaced by this process,
// so a SIGTERM that npm forwards (a process manager or container runtime stopping npm) reaches us.
// A `sh -c "build && start"` sat in between and swallowed it, leaving the stack running.
//
// This launcher builds (unless --no-build) and then only relays signals. The stack itself
// (scripts/lib/stack.mjs) runs in a process group of its own, so a terminal Ctrl-C reaches it once,
// through here, instead of hitting every service, nats-server and PostgreSQL at the same instant:
// the stack can then stop the services first (in reverse start order) and the infrastructure they
// drain into last.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const args = process.argv.slice(2);
const build = !args.includes('--no-build') && process.env.KANDEV_NO_BUILD !== '1';
const stackArgs = args.filter((a) => a !== '--no-build');

/** The child running now: the build (`tsc -b`, the console), then the stack. */
/** @type {import('node:child_process').ChildProcess | null} */
let child = null;
let stopRequested = false;

// npm forwards a Ctrl-C on top of the terminal's own, so one key press may arrive twice here;
// the stack treats a repeat within 2 s as the same request.
for (const sig of /** @type {const} */ (['SIGINT', 'SIGTERM', 'SIGHUP'])) {
  process.on(sig, () => {
    stopRequested = true;
    if (child && child.exitCode === null && child.signalCode === null) child.kill(sig === 'SIGHUP' ? 'SIGTERM' : sig);
    else if (!child) process.exit(0);
  });
}

/**
 * @param {string[]} args
 * @returns {Promise<{ ok: boolean, why: string }>}
 */
function runBuild(args) {
  return new Promise((resolve) => {
    child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', (e) => resolve({ ok: false, why: e.message }));
    child.once('exit', (code, signal) => resolve({ ok: code === 0, why: signal ?? `exit code ${code}` }));
  });
}

if (build) {
  // `tsc -b`, then the bundles of the services and agentctl, and the operator console's (each a no-op
  // when up to date).
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  let result = await runBuild([tsc, '-b']);
  for (const script of ['./bundle.mjs', './build-console.mjs']) {
    if (result.ok && !stopRequested) result = await runBuild([fileURLToPath(new URL(script, import.meta.url))]);
  }
  child = null;
  if (stopRequested) process.exit(0);
  if (!result.ok) {
    console.error(`[kandev] build failed (${result.why}); not starting`);
    process.exit(1);
  }
}

// lifecycle refuses a state, work or bundle directory agent uids cannot enter. Said first,
// in its words, rather than as lifecycle's failed start in a log tail (the same check:
// services/lifecycle/src/isolation/agent-access.ts).
try {
  const refusal = await lifecyclePreflight();
  if (refusal) {
    console.error(`[kandev] ${refusal}`);
    process.exit(1);
  }
} catch (e) {
  console.error(`[kandev] ${/** @type {Error} */ (e).message}; not starting`); // a malformed KANDEV_AGENT_CATALOGUE, say
  process.exit(1);
}

async function lifecyclePreflight() {
  if (process.geteuid?.() !== 0) return null;
  const { preflight } = await import('../services/lifecycle/dist/isolation/agent-access.js');
  const { loadCatalogue } = await import('../packages/agentctl/dist/catalogue.js');
  const { stateDir } = await import('./lib/state.mjs');
  const agentctlBin = fileURLToPath(new URL('../packages/agentctl/dist/agentctl.bundle.js', import.meta.url));
  return preflight({ env: process.env, stateDir: stateDir(), agentctlBin, agents: [...loadCatalogue(process.env).values()], euid: process.geteuid() });
}

child = spawn(process.execPath, [fileURLToPath(new URL('./lib/stack.mjs', import.meta.url)), ...stackArgs], {
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  detached: true,
  env: process.env,
});

child.once('error', (e) => {
  console.error(`[kandev] could not start the stack: ${e.message}`);
  process.exit(1);
});
child.once('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
