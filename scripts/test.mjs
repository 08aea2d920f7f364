#!/usr/bin/env node
// `npm test` after the build and the dependency check: the static checks, then every workspace's
// tests. docs/testing.md has the measurements behind each choice.
//
// 1. Checks: lint, typecheck:tests and format:check side by side (each is one process, and they
//    finish in the time of the longest plus a little), before any test runs.
// 2. Tests, in two lanes at once:
//    - e2e, alone in its lane: the longest package (each file a whole stack) and so the critical
//      path; it starts first and runs at normal priority.
//    - the rest, one phase after the other: pure (contracts, agentctl, deploy: no NATS, PostgreSQL
//      or stack; a contract or agentctl break reports in the first minute), the service packages
//      two at a time, then agents-e2e and bench (no tests of its own), then e2e's console file
//      (E2E_LATE: it balances the lanes and runs where the cores are calmer). Pure and services run at
//      `nice` LANE_NICE (10): they are CPU-heavy (imports, transforms) and would otherwise take
//      the cores from e2e's stacks; agents-e2e, timing-sensitive like e2e, runs at normal priority.
//    One after the other the same work took about 480 s on a quiet 2-core machine; the lanes keep
//    the cores busy while e2e's files wait on the system's own bounds.
//
// A failed check stops the run (as the build does). After that, every phase runs even when an
// earlier one failed (as `turbo --continue` does), so a run reports every failure; the exit code is
// the first non-zero one. Arguments are passed to turbo.
import { spawn } from 'node:child_process';

const PURE = ['@kandev/contracts', '@kandev/agentctl', '@kandev/deploy'];
const E2E = ['@kandev/e2e'];
const LATE_STACKS = ['@kandev/bench', '@kandev/agents-e2e'];
const SERVICES = [...PURE, ...E2E, ...LATE_STACKS].map((p) => `!${p}`);
// e2e files run at the end of the other lane instead: the console's (a browser beside a stack) took
// 15 s alone and 42 s beside the service packages, and moving it balances the two lanes.
const E2E_LATE = 'test/console';
const NICE = process.env.LANE_NICE ?? '10';

const seconds = (since) => Math.round((Date.now() - since) / 1000);

/** Runs a command to its end; resolves with its exit code (1 if it died of a signal). */
function run(cmd, args, { nice, quiet } = {}) {
  const [file, argv] = nice && nice !== '0' ? ['nice', ['-n', nice, cmd, ...args]] : [cmd, args];
  return new Promise((resolve) => {
    const child = spawn(file, argv, { stdio: quiet ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    let output = '';
    if (quiet) for (const s of [child.stdout, child.stderr]) s.on('data', (d) => (output += d));
    child.on('error', (e) => resolve({ code: 1, output: `${output}${e.message}\n` }));
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

/** One turbo `test` run over the filters; logs its outcome and wall time. */
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

/** The static checks side by side; each one's output is printed whole when it ends, not interleaved. */
async function checks() {
  const started = Date.now();
  const results = await Promise.all(
    ['lint', 'typecheck:tests', 'format:check'].map(async (script) => {
      const t = Date.now();
      const { code, output } = await run('npm', ['run', script, '--silent'], { quiet: true });
      console.log(`[test] ${script}: ${code === 0 ? 'passed' : `failed (exit ${code})`} in ${seconds(t)} s`);
      if (output.trim()) process.stdout.write(output);
      return code;
    }),
  );
  console.log(`[test] checks: ${seconds(started)} s`);
  return results.find((c) => c !== 0) ?? 0;
}

const first = (...codes) => codes.find((c) => c !== 0) ?? 0;

const started = Date.now();
const checked = await checks();
if (checked !== 0) {
  // A type or lint error usually breaks tests too; report it alone instead of a wall of failures.
  process.exit(checked);
}
const [e2e, rest] = await Promise.all([
  phase('e2e', E2E, { vitestArgs: [`--exclude=${E2E_LATE}/**`] }),
  (async () => {
    const pure = await phase('pure', PURE, { concurrency: 2, nice: NICE });
    const services = await phase('services', SERVICES, { concurrency: 2, nice: NICE });
    const late = await phase('agents-e2e', LATE_STACKS);
    const browser = await phase('e2e console', E2E, { vitestArgs: [E2E_LATE] });
    return first(pure, services, late, browser);
  })(),
]);
console.log(`[test] all: ${seconds(started)} s`);
process.exit(first(rest, e2e));
