// `npm start` supervision of its own nats-server and PostgreSQL: each killed, restarted on the
// same port and data, and the stack serves again.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cmdline, descendants, procStat } from '../src/procs.js';
import { runCleanups, sleep, startStack, stoppedWithin } from './start-harness.js';

afterAll(runCleanups);

describe('npm start supervision of its own nats-server and PostgreSQL', () => {
  it('restarts a killed nats-server and a killed PostgreSQL on the same port and data; the stack serves again', async () => {
    const s = await startStack('launcher');
    const token = readFileSync(join(s.stateDir, 'operator-token'), 'utf8').trim();
    const api = (method: string, path: string, body?: unknown) =>
      fetch(`${s.gateway}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(10_000),
      }).then(
        async (r) => ({ status: r.status, body: (await r.json().catch(() => null)) as Record<string, unknown> | null }),
        () => ({ status: 0, body: null }),
      );
    /** The stack serves: a workspace and task are written (PostgreSQL) and a session starts (NATS, lifecycle). */
    const serves = async () => {
      for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(500)) {
        const ws = await api('POST', '/workspaces', { name: 'supervised' });
        if (ws.status !== 201) continue;
        const task = await api('POST', '/tasks', { workspace_id: ws.body!.id, title: 't' });
        if (task.status !== 201) continue;
        const session = await api('POST', `/tasks/${task.body!.id as string}/sessions`, {});
        if (session.status === 201) return true;
      }
      return false;
    };
    expect(await serves(), s.out()).toBe(true);
    const direct = (re: RegExp) =>
      descendants(s.child.pid!).find((p) => re.test(p.cmd) && procStat(p.pid)?.ppid !== undefined && /stack\.mjs/.test(cmdline(procStat(p.pid)!.ppid)));

    const nats = direct(/nats-server/)!;
    expect(nats, s.out()).toBeDefined();
    process.kill(nats.pid, 'SIGKILL');
    for (const deadline = Date.now() + 30_000; !/nats-server restarted/.test(s.out()) && Date.now() < deadline;) await sleep(100);
    expect(s.out()).toMatch(/nats-server exited unexpectedly \(SIGKILL\); restarting/);
    expect(await serves(), s.out()).toBe(true);

    const pg = direct(/bin\/postgres/)!;
    expect(pg, s.out()).toBeDefined();
    process.kill(pg.pid, 'SIGKILL');
    for (const deadline = Date.now() + 60_000; !/PostgreSQL restarted/.test(s.out()) && Date.now() < deadline;) await sleep(100);
    expect(s.out()).toMatch(/PostgreSQL exited unexpectedly \(SIGKILL\); restarting/);
    expect(await serves(), s.out()).toBe(true);

    s.child.kill('SIGTERM');
    expect(await stoppedWithin(s, 45_000), s.out()).toEqual({ code: 0, signal: null });
    expect(
      (await s.survivors()).map((p) => `${p.pid} ${p.cmd}`),
      s.out(),
    ).toEqual([]);
  }, 240_000);
});
