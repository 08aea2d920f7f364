import type { NatsConnection, RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import type { ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cap } from '@kandev/runtime/host';
import { isolationMode, parseUidRange, pickFreeUid } from '../src/domain/agent-uids.js';
import { FakeOrchestrator, killHard, launch, launchRequest, natsClient, startLifecycle, stopAt, tmpStateDir, spawnLifecycle } from './helpers.js';
import { CPU_CGROUP } from '../../../vitest.host.js';

const bit = (...caps: number[]) => caps.reduce((m, c) => m | (1n << BigInt(c)), 0n);

describe('agent uids (domain)', () => {
  it('parses AGENT_UID_RANGE', () => {
    expect(parseUidRange('20000-29999')).toEqual({ first: 20000, last: 29999 });
    expect(parseUidRange(' 5000 - 5000 ')).toEqual({ first: 5000, last: 5000 });
    for (const bad of ['', '20000', '0-100', '999-2000', '3000-2000', 'a-b', '1000-2147483647']) expect(typeof parseUidRange(bad)).toBe('string');
  });

  it('picks the next uid no execution holds and no process has, from the cursor, wrapping once', () => {
    const range = { first: 100, last: 104 };
    expect(pickFreeUid(range, () => false, 100)).toBe(100);
    expect(pickFreeUid(range, () => false, 103)).toBe(103);
    expect(pickFreeUid(range, (u) => u >= 103, 103)).toBe(100);
    expect(pickFreeUid(range, (u) => u !== 102, 103)).toBe(102);
    expect(pickFreeUid(range, () => true, 100)).toBeNull();
    // A cursor outside the range starts at its beginning.
    expect(pickFreeUid(range, () => false, 7)).toBe(100);
  });

  it('isolates when root or holding SETUID, SETGID, CHOWN and KILL; otherwise same_uid', () => {
    const all = bit(Cap.SETUID, Cap.SETGID, Cap.CHOWN, Cap.KILL);
    expect(isolationMode({ euid: 0, capEff: 0x1ffffffffffn }, 'auto').mode).toBe('uid_per_execution');
    expect(isolationMode({ euid: 1000, capEff: all }, 'auto').mode).toBe('uid_per_execution');
    expect(isolationMode({ euid: 1000, capEff: 0n }, 'auto').mode).toBe('same_uid');
    expect(isolationMode({ euid: 1000, capEff: bit(Cap.SETUID, Cap.SETGID, Cap.CHOWN) }, 'auto').mode).toBe('same_uid');
    expect(isolationMode({ euid: 0, capEff: 0n }, 'auto').mode).toBe('same_uid');
    expect(isolationMode({ euid: 0, capEff: 0x1ffffffffffn }, 'off')).toEqual({ mode: 'same_uid', why: 'AGENT_ISOLATION=off' });
    expect(isolationMode({ euid: null, capEff: null }, 'auto').mode).toBe('same_uid');
  });
});

const readyz = async (healthUrl: string) =>
  (await fetch(`${healthUrl}/readyz`)).json() as Promise<{
    status: string;
    details?: { agent_isolation?: string; stopping_cpu?: string; draining?: boolean; executions?: number };
  }>;
const uidOf = (pid: number): number => Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);

describe('where lifecycle cannot change uids, agents share its uid and it says so', { timeout: 120_000 }, () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let inProcess: RunningService | undefined;
  let child: ChildProcess | undefined;
  const dirs: string[] = [];

  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'agent-uids-test');
    await FakeOrchestrator.start(nc);
  });
  afterAll(async () => {
    await inProcess?.stop();
    if (child) await killHard(child);
    await nc?.close();
    await nats?.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('reports uid_per_execution as root, and same_uid with AGENT_ISOLATION=off', async () => {
    const stoppingCpu = CPU_CGROUP.present ? 'cgroup' : 'autogroup';
    const dir = tmpStateDir();
    dirs.push(dir);
    const root = await startLifecycle(nats.url, 'life-root', dir);
    try {
      expect((await readyz(root.healthUrl)).details).toEqual({
        agent_isolation: 'uid_per_execution',
        agent_access: 'ok',
        // This project's test machines are root with nftables (ADR 0057).
        agent_network: 'loopback_restricted',
        stopping_cpu: stoppingCpu,
        draining: false,
        executions: 0,
        max_executions: expect.any(Number),
        // A bare test nats-server and no bus keys (ADR 0054, 0055).
        nats_auth: 'none',
        bus_identity: 'off',
      });
    } finally {
      await root.stop();
    }
    inProcess = await startLifecycle(nats.url, 'life-off', dir, { AGENT_ISOLATION: 'off' });
    expect((await readyz(inProcess.healthUrl)).details).toEqual({
      agent_isolation: 'same_uid',
      agent_access: 'ok',
      agent_network: 'unrestricted',
      stopping_cpu: stoppingCpu,
      draining: false,
      executions: 0,
      max_executions: expect.any(Number),
      nats_auth: 'none',
      bus_identity: 'off',
    });
    const x = await launch(nc, launchRequest());
    expect(uidOf(x.pid!)).toBe(process.getuid!());
    await stopAt(nc, 'life-off', { execution_id: x.execution_id, reason: 'test' });
    await inProcess.stop();
    inProcess = undefined;
  });

  it('run as a non-root uid: warns once at start, /readyz says same_uid, and its agents run under its uid', async () => {
    const uid = 28_123;
    const dir = mkdtempSync(join(tmpdir(), 'kandev-nonroot-'));
    dirs.push(dir);
    chownSync(dir, uid, uid);
    const lines: string[] = [];
    child = await spawnLifecycle(
      { NATS_URL: nats.url, INSTANCE_ID: 'life-nonroot', KANDEV_STATE_DIR: dir, HEALTH_PORT: '0', AGENTS_EXIT_WITH_LIFECYCLE: 'true' },
      (l) => lines.push(l),
      { uid, gid: uid },
    );
    const started = lines
      .map((l) => JSON.parse(l) as { msg?: string; urls?: { health?: string }; agent_isolation?: string; level?: string })
      .find((l) => l.msg === 'lifecycle started')!;
    const warnings = lines.filter((l) => l.includes("agents run under this service's own uid"));
    expect(warnings).toHaveLength(1);
    expect(JSON.parse(warnings[0]!)).toMatchObject({ level: 'warn', agent_isolation: 'same_uid' });
    // Not root: it cannot make the host's stopping cpu group, and lowers each stopping session instead.
    expect((await readyz(started.urls!.health!)).details).toEqual({
      agent_isolation: 'same_uid',
      agent_access: 'ok',
      agent_network: 'unrestricted',
      stopping_cpu: 'autogroup',
      draining: false,
      executions: 0,
      max_executions: expect.any(Number),
      nats_auth: 'none',
      bus_identity: 'off',
    });

    const x = await launch(nc, launchRequest());
    expect(uidOf(x.pid!)).toBe(uid);
    await stopAt(nc, 'life-nonroot', { execution_id: x.execution_id, reason: 'test' });
  });
});
