#!/usr/bin/env node
// `npm test` after the build and the dependency check: every workspace's tests, pure ones first,
// then the rest in two lanes side by side, so that the longest chain (e2e) starts as early as it can.
//
// 1. Pure: packages whose tests start no NATS, PostgreSQL or stack (contracts: zod rules and
//    property tests; agentctl: its own processes and the scripted agents), two at a time. They
//    report within the first minute, before anything starts a server.
// 2. Two lanes at once:
//    - e2e: every file starts a whole stack (five services, NATS, agents), one file at a time;
//    - services, then agents-e2e: the packages whose tests start a nats-server and clone databases,
//      one package at a time (each runs 4 of its files at a time), then the published agents' tests
//      (one file at a time, each with its own stack).
//    Most of a file's time is waiting on a server, a child process or the system's own bounds, so
//    two lanes share two cores without slowing each other much; the lanes share nothing but the
//    host (each file its own servers; agent uid locks are the host's, ADR 0040). docs/testing.md
//    has the measurements.
//
// Every phase runs even when an earlier one failed (as `turbo --continue` did), so a run reports
// every failure; the exit code is the first non-zero one. Arguments are passed to turbo.
import { spawn } from 'node:child_process';

const PURE = ['@kandev/contracts', '@kandev/agentctl', '@kandev/deploy'];
const E2E = '@kandev/e2e';
const AGENTS_E2E = '@kandev/agents-e2e';
// bench has no tests of its own; it is left out of the services phase with the stack packages.
const NOT_SERVICES = [...PURE, E2E, AGENTS_E2E, '@kandev/bench'];

/** Runs one phase through turbo; resolves to its exit code. */
function phase({ name, concurrency, filters }) {
  const started = Date.now();
  console.log(`\n[test] phase ${name}: ${filters.join(' ')}`);
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
  return new Promise((resolve) => {
    const child = spawn('npx', args, { stdio: 'inherit' });
    child.on('error', (err) => {
      console.error(`[test] phase ${name}: ${err.message}`);
      resolve(1);
    });
    child.on('exit', (code) => {
      const status = code ?? 1;
      console.log(`[test] phase ${name}: ${status === 0 ? 'passed' : `failed (exit ${status})`} in ${Math.round((Date.now() - started) / 1000)} s`);
      resolve(status);
    });
  });
}

/** Phases one after the other, every one even after a failure; resolves to the codes in order. */
async function lane(phases) {
  const codes = [];
  for (const p of phases) codes.push(await phase(p));
  return codes;
}

const pure = await phase({ name: 'pure', concurrency: 2, filters: PURE });
const [e2e, rest] = await Promise.all([
  lane([{ name: 'e2e', concurrency: 1, filters: [E2E] }]),
  lane([
    { name: 'services', concurrency: 1, filters: NOT_SERVICES.map((p) => `!${p}`) },
    { name: 'agents-e2e', concurrency: 1, filters: [AGENTS_E2E] },
  ]),
]);
// The first failure in the order the phases are listed above.
process.exit([pure, ...e2e, ...rest].find((c) => c !== 0) ?? 0);
