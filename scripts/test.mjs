#!/usr/bin/env node
// `npm test`: the build and the static checks, then every workspace's tests. docs/testing.md says
// why each choice; docs/history/testing-measurements.md has the measurements behind them.
//
// 1. The build (`tsc -b`, the bundles, the console's bundle), format:check, the dependency check and
//    lint (the type check and the type-aware lint over one program, scripts/lint.mjs), all at once:
//    none needs another's output (lint reads the workspaces' sources, `paths` in
//    tsconfig.lint.json). Each is one process; a failure stops the run before any test.
// 2. Tests, in two lanes at once:
//    - e2e, alone in its lane: the longest package (each file a whole stack); it starts first and
//      runs at normal priority.
//    - the rest, one phase after the other: pure (contracts, agentctl, deploy: no NATS, PostgreSQL
//      or stack; a contract or agentctl break reports in the first minute), the service packages
//      two at a time with two files each (SERVICE_WORKERS), then agents-e2e. Pure and services run
//      at `nice` LANE_NICE (5): they are CPU-heavy (imports, transforms) and would otherwise take
//      the cores from e2e's stacks; agents-e2e, timing-sensitive, runs at normal priority. The two
//      lanes take about as long (docs/history/testing-measurements.md).
//    agents-e2e is not a workspace: the published agents install into it from its own lockfile
//    (agents-e2e/install.mjs), not with the root's `npm ci`. That install starts with the lanes,
//    at LANE_NICE (it waits mostly on the registry and the disk), and its phase waits for it. Not
//    beside the checks: lint reads agents-e2e's imports, which npm would be writing. bench has no
//    tests.
//    One after the other the same work took about 480 s on a quiet 2-core machine; the lanes keep
//    the cores busy while e2e's files wait on the system's own bounds.
//
// After the checks, every phase runs even when an earlier one failed (as `turbo --continue` does),
// so a run reports every failure; the exit code is the first non-zero one. Arguments are passed to
// turbo.
import { spawn } from 'node:child_process';

const PURE = ['@kandev/contracts', '@kandev/agentctl', '@kandev/deploy'];
const E2E = ['@kandev/e2e'];
const NO_TESTS = ['@kandev/bench'];
const SERVICES = [...PURE, ...E2E, ...NO_TESTS].map((p) => `!${p}`);
const AGENTS_E2E = 'agents-e2e';
const NICE = process.env.LANE_NICE ?? '5';
// Files at once per service package. Niced beside e2e's stacks, eight files at once (two packages
// of four) left each a few percent of a core on a busy CI runner: service starts and 10 s waits ran
// out (docs/history/testing-measurements.md). Four at once cost little on a quiet machine.
const SERVICE_WORKERS = process.env.SERVICE_WORKERS ?? '2';

/** @param {number} since */
const seconds = (since) => Math.round((Date.now() - since) / 1000);

/**
 * Runs a command to its end; resolves with its exit code (1 if it died of a signal).
 * @param {string} cmd
 * @param {string[]} args
 * @param {{ nice?: string, quiet?: boolean }} [opts]
 * @returns {Promise<{ code: number, output: string }>}
 */
function run(cmd, args, { nice, quiet } = {}) {
  /** @type {[string, string[]]} */
  const [file, argv] = nice && nice !== '0' ? ['nice', ['-n', nice, cmd, ...args]] : [cmd, args];
  return new Promise((resolve) => {
    const child = spawn(file, argv, { stdio: quiet ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    let output = '';
    if (quiet) for (const s of [child.stdout, child.stderr]) s?.on('data', (d) => (output += d));
    child.on('error', (e) => resolve({ code: 1, output: `${output}${e.message}\n` }));
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

/**
 * One turbo `test` run over the filters; logs its outcome and wall time.
 * @param {string} name
 * @param {string[]} filters
 * @param {{ concurrency?: number, nice?: string, vitestArgs?: string[] }} [opts]
 */
async function phase(name, filters, { concurrency = 1, nice, vitestArgs = [] } = {}) {
  const started = Date.now();
  console.log(`\n[test] phase ${name}: ${[...filters, ...vitestArgs].join(' ')}`);
  const args = [
    'turbo',
    'run',
    'test',
    `--concurrency=${concurrency}`,
    '--continue',
    '--log-order=stream',
    ...filters.map((f) => `--filter=${f}`),
    ...process.argv.slice(2),
  ];
  // Arguments after `--` go to the package's test script (vitest): a file filter or an exclusion.
  if (vitestArgs.length) args.push('--', ...vitestArgs);
  const { code } = await run('npx', args, { nice });
  console.log(`[test] phase ${name}: ${code === 0 ? 'passed' : `failed (exit ${code})`} in ${seconds(started)} s`);
  return code;
}

/**
 * Commands side by side; each one's output is printed whole when it ends, not interleaved.
 * @param {string} name
 * @param {string[][]} commands `[label, command, ...args]` each
 */
async function together(name, commands) {
  const started = Date.now();
  const results = await Promise.all(
    commands.map(async ([label = '', cmd = '', ...args]) => {
      const t = Date.now();
      const { code, output } = await run(cmd, args, { quiet: true });
      console.log(`[test] ${label}: ${code === 0 ? 'passed' : `failed (exit ${code})`} in ${seconds(t)} s`);
      if (output.trim()) process.stdout.write(output);
      return code;
    }),
  );
  console.log(`[test] ${name}: ${seconds(started)} s`);
  return first(...results);
}

/**
 * agents-e2e's own `npm test` (its tests, at normal priority), once its agents are installed.
 * @param {Promise<{ code: number, output: string }>} installing
 */
async function agentsE2e(installing) {
  const started = Date.now();
  console.log(`\n[test] phase agents-e2e: npm test in ${AGENTS_E2E}/`);
  const { code: installed, output } = await installing;
  if (output.trim()) process.stdout.write(output);
  const { code } = installed === 0 ? await run('npm', ['test', '--prefix', AGENTS_E2E, '--silent']) : { code: installed };
  console.log(`[test] phase agents-e2e: ${code === 0 ? 'passed' : `failed (exit ${code})`} in ${seconds(started)} s`);
  return code;
}

/** @param {...number} codes */
const first = (...codes) => codes.find((c) => c !== 0) ?? 0;
/** @param {string} script */
const npmRun = (script) => [script, 'npm', 'run', script, '--silent'];

const started = Date.now();
// One after the other (build beside Prettier, then lint beside the type check, which read the
// built declarations then) they took 119 s of a clean clone; side by side the two cores stay busy.
const checked = await together('build and checks', [
  npmRun('build'),
  npmRun('format:check'),
  ['check-deps', 'node', 'scripts/check-deps.mjs'],
  ['adr-index', 'node', 'scripts/adr-index.mjs', '--check'],
  ['bench-tables', 'node', 'scripts/bench-tables.mjs', '--check'],
  npmRun('lint'),
]);
if (checked !== 0) {
  // A type or lint error usually breaks tests too; report it alone instead of a wall of failures.
  process.exit(checked);
}
const installing = run('node', [`${AGENTS_E2E}/install.mjs`], { quiet: true, nice: NICE });
const [e2e, rest] = await Promise.all([
  phase('e2e', E2E),
  (async () => {
    const pure = await phase('pure', PURE, { concurrency: 2, nice: NICE });
    const services = await phase('services', SERVICES, { concurrency: 2, nice: NICE, vitestArgs: [`--maxWorkers=${SERVICE_WORKERS}`] });
    const late = await agentsE2e(installing);
    return first(pure, services, late);
  })(),
]);
console.log(`[test] all: ${seconds(started)} s`);
process.exit(first(rest, e2e));
