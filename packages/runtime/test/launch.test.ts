import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startNats, type TestNats } from '@kandev/testkit';
import { profilingArgs, spawnServiceProcess } from '../src/dev/launch.js';

let nats: TestNats;
let dir: string;
beforeAll(async () => {
  nats = await startNats();
  dir = mkdtempSync(join(tmpdir(), 'kandev-cpu-prof-'));
});
afterAll(async () => {
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

it('profiles only the services KANDEV_CPU_PROF names', () => {
  expect(profilingArgs('orchestrator', {})).toEqual([]);
  expect(profilingArgs('orchestrator', { KANDEV_CPU_PROF: 'mcp, gateway' })).toEqual([]);
  expect(profilingArgs('mcp', { KANDEV_CPU_PROF: 'mcp, gateway', KANDEV_CPU_PROF_DIR: '/p' })).toEqual(['--cpu-prof', '--cpu-prof-dir=/p/mcp']);
  expect(profilingArgs('holds', { KANDEV_CPU_PROF: 'all' })).toEqual(['--cpu-prof', '--cpu-prof-dir=cpu-profiles/holds']);
  expect(profilingArgs('mcp', { KANDEV_CPU_PROF: 'mcp', KANDEV_CPU_PROF_INTERVAL_US: '50' })).toEqual([
    '--cpu-prof',
    '--cpu-prof-dir=cpu-profiles/mcp',
    '--cpu-prof-interval=50',
  ]);
  expect(profilingArgs('mcp', { KANDEV_CPU_PROF: 'mcp', KANDEV_CPU_PROF_INTERVAL_US: 'fast' })).toEqual(['--cpu-prof', '--cpu-prof-dir=cpu-profiles/mcp']);
});

it('a profiled service writes its CPU profile when it stops', { timeout: 90_000 }, async () => {
  const before = { prof: process.env.KANDEV_CPU_PROF, dir: process.env.KANDEV_CPU_PROF_DIR };
  process.env.KANDEV_CPU_PROF = 'holds';
  process.env.KANDEV_CPU_PROF_DIR = dir;
  try {
    const svc = await spawnServiceProcess({
      name: 'holds',
      entry: fileURLToPath(new URL('./fixtures/slow-service.mjs', import.meta.url)),
      env: { ...process.env, NATS_URL: nats.url, LOG_LEVEL: 'info' },
      // A profiled start is slower, and this lane runs niced beside e2e's stacks: the 20 s default
      // was outlasted once on a busy CI runner.
      startTimeoutMs: 45_000,
    });
    // Its own shutdown bound (SHUTDOWN_TIMEOUT_MS, 10 s by default) with headroom before the SIGKILL,
    // which would leave no profile: writing one makes a stop slower, and a loaded CI machine more so.
    await svc.stop(20_000);
  } finally {
    process.env.KANDEV_CPU_PROF = before.prof;
    process.env.KANDEV_CPU_PROF_DIR = before.dir;
    if (before.prof === undefined) delete process.env.KANDEV_CPU_PROF;
    if (before.dir === undefined) delete process.env.KANDEV_CPU_PROF_DIR;
  }
  expect(readdirSync(join(dir, 'holds')).filter((f) => f.endsWith('.cpuprofile'))).toHaveLength(1);
});
