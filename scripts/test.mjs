#!/usr/bin/env node
// `npm test` after the build and the dependency check: every workspace's tests, in three phases so
// that the fast ones report first and the ones that need no infrastructure share the cores.
//
// 1. Pure: packages whose tests start no NATS, PostgreSQL or stack (contracts: zod rules and
//    property tests; agentctl: its own processes and the scripted agents), two at a time.
// 2. Services: the packages whose tests start a nats-server and clone databases, two packages at a
//    time (each runs its files in parallel too; most of a file's time is waiting on a server, a
//    child process or a bound, so two packages share two cores without slowing each other much).
// 3. Whole stacks: e2e, bench (no tests of its own), agents-e2e, one at a time, last (slowest to
//    start). e2e beside agents-e2e saved about 75 s but failed one clean-clone run in five (a gemini
//    ask that never became active, most likely the deadlock ADR 0048 fixed since), so they stay
//    apart until repeated runs show the pairing stable.
// docs/testing.md has the measurements behind each concurrency.
//
// Every phase runs even when an earlier one failed (as `turbo --continue` did), so a run reports
// every failure; the exit code is the first non-zero one. Arguments are passed to turbo.
import { spawnSync } from 'node:child_process';

const PURE = ['@kandev/contracts', '@kandev/agentctl', '@kandev/deploy'];
const STACKS = ['@kandev/e2e', '@kandev/bench', '@kandev/agents-e2e'];

const phases = [
  { name: 'pure', concurrency: 2, filters: PURE },
  { name: 'services', concurrency: 2, filters: [...PURE, ...STACKS].map((p) => `!${p}`) },
  { name: 'stacks', concurrency: 1, filters: STACKS },
];

let status = 0;
for (const phase of phases) {
  const started = Date.now();
  console.log(`\n[test] phase ${phase.name}: ${phase.filters.join(' ')}`);
  const args = [
    'turbo',
    'run',
    'test',
    `--concurrency=${phase.concurrency}`,
    '--continue',
    '--log-order=stream',
    ...phase.filters.map((f) => `--filter=${f}`),
    ...process.argv.slice(2),
  ];
  const r = spawnSync('npx', args, { stdio: 'inherit' });
  const code = r.status ?? 1;
  console.log(`[test] phase ${phase.name}: ${code === 0 ? 'passed' : `failed (exit ${code})`} in ${Math.round((Date.now() - started) / 1000)} s`);
  if (code !== 0 && status === 0) status = code;
}
process.exit(status);
