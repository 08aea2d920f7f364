// `npm start` supervision: a service killed with -9 is restarted and the stack serves
// again; a crash loop stops everything; every way of stopping npm start (SIGTERM to npm's own pid,
// SIGINT to its process group, SIGTERM to the launcher) leaves nothing running.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../src/paths.js';
import { cmdline, descendants, procAlive, procStat, type Proc } from '../src/procs.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function deadPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

const cleanups: Array<() => void | Promise<void>> = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

interface Started {
  child: ChildProcess;
  out: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Everything below the spawned process, sampled every 100 ms while it runs. */
  seen: Map<string, Proc>;
  gateway: string;
  servicePid(name: string): number | undefined;
  survivors(): Promise<Proc[]>;
}

/** Start `npm start` (or the launcher directly) in a process group of its own and wait for "kandev is up". */
async function startStack(how: 'npm' | 'launcher', extraEnv: Record<string, string> = {}): Promise<Started> {
  const base = mkdtempSync(join(tmpdir(), 'kandev-sup-'));
  chmodSync(base, 0o755);
  const state = join(base, 'state');
  mkdirSync(state);
  cleanups.push(() => rmSync(base, { recursive: true, force: true }));
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of ['DATABASE_URL', 'KANDEV_JWT_SECRET', 'KANDEV_OPERATOR_JWT_SECRET', 'KANDEV_AGENT_JWT_SECRET', 'KANDEV_SERVICES', 'KANDEV_LOG_STDOUT', 'NATS_USER', 'NATS_PASS']) delete env[k];
  Object.assign(env, { KANDEV_STATE_DIR: state, GATEWAY_PORT: '0', MCP_PORT: '0', NATS_URL: `nats://127.0.0.1:${await deadPort()}`, LOG_LEVEL: 'info' }, extraEnv);
  const [cmd, args] = how === 'npm' ? ['npm', ['start', '--silent']] : [process.execPath, ['scripts/start.mjs', '--no-build']];
  // detached: its own process group, as a terminal's foreground job is.
  const child = spawn(cmd as string, args as string[], { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  let hasExited = false;
  void exited.then(() => (hasExited = true));
  const seen = new Map<string, Proc>();
  const sample = () => {
    for (const p of descendants(child.pid!)) seen.set(`${p.pid}:${p.start}`, p);
  };
  const sampler = setInterval(sample, 100);
  cleanups.push(async () => {
    clearInterval(sampler);
    if (!hasExited) child.kill('SIGKILL');
    for (const p of seen.values()) if (procAlive(p)) process.kill(p.pid, 'SIGKILL');
  });
  let gateway: string | undefined;
  for (const deadline = Date.now() + 90_000; !gateway && !hasExited && Date.now() < deadline; await sleep(100)) {
    gateway = /kandev is up[\s\S]*?^\s*Gateway:\s+(http\S+)/m.exec(out)?.[1];
  }
  expect(gateway, `no gateway URL:\n${out}`).toBeDefined();
  return {
    child,
    out: () => out,
    exited,
    seen,
    gateway: gateway!,
    servicePid: (name) => {
      sample();
      return descendants(child.pid!).find((p) => p.cmd.includes(`services/${name}/dist/main.js`))?.pid;
    },
    survivors: async () => {
      clearInterval(sampler);
      let left = [...seen.values()].filter(procAlive);
      for (const deadline = Date.now() + 5_000; left.length && Date.now() < deadline; await sleep(100)) left = left.filter(procAlive);
      return left;
    },
  };
}

async function readyz(gateway: string, deadlineMs: number): Promise<number> {
  let status = 0;
  for (const deadline = Date.now() + deadlineMs; status !== 200 && Date.now() < deadline; ) {
    status = await fetch(`${gateway}/readyz`, { signal: AbortSignal.timeout(2_000) }).then((r) => r.status, () => 0);
    if (status !== 200) await sleep(200);
  }
  return status;
}

async function stoppedWithin(s: Started, ms: number) {
  return Promise.race([s.exited, sleep(ms).then(() => null)]);
}

describe('npm start supervision', () => {
  it('restarts a service killed with -9 (the stack serves again), and SIGTERM to npm\'s own pid stops everything', async () => {
    const s = await startStack('npm');
    expect(await readyz(s.gateway, 30_000)).toBe(200);
    const before = s.servicePid('gateway');
    expect(before, s.out()).toBeDefined();
    process.kill(before!, 'SIGKILL');

    let after: number | undefined;
    for (const deadline = Date.now() + 40_000; Date.now() < deadline; await sleep(200)) {
      after = s.servicePid('gateway');
      if (after && after !== before && /gateway restarted/.test(s.out())) break;
    }
    expect(after, s.out()).toBeDefined();
    expect(after).not.toBe(before);
    expect(s.out()).toMatch(/gateway exited unexpectedly \(SIGKILL\); restarting in \d+ ms/);
    // Same URL as printed: the port was pinned when npm start began.
    expect(await readyz(s.gateway, 30_000), s.out()).toBe(200);

    s.child.kill('SIGTERM'); // npm's own pid, as a process manager would
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, `npm start did not exit within 45 s of SIGTERM\n${s.out()}`).not.toBeNull();
    expect((await s.survivors()).map((p) => `${p.pid} ${p.cmd}`), s.out()).toEqual([]);
  }, 180_000);

  it('SIGINT to the process group stops everything', async () => {
    const s = await startStack('launcher');
    process.kill(-s.child.pid!, 'SIGINT');
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, s.out()).toEqual({ code: 0, signal: null });
    expect((await s.survivors()).map((p) => `${p.pid} ${p.cmd}`), s.out()).toEqual([]);
  }, 150_000);

  it('SIGTERM to the launcher stops everything', async () => {
    const s = await startStack('launcher');
    s.child.kill('SIGTERM');
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, s.out()).toEqual({ code: 0, signal: null });
    expect((await s.survivors()).map((p) => `${p.pid} ${p.cmd}`), s.out()).toEqual([]);
  }, 150_000);

  it('gives up on a crash loop: stops everything and exits 1', async () => {
    const s = await startStack('launcher', { KANDEV_RESTART_LIMIT: '2', KANDEV_RESTART_BACKOFF_MS: '100' });
    const first = s.servicePid('orchestrator')!;
    process.kill(first, 'SIGKILL');
    let second: number | undefined;
    for (const deadline = Date.now() + 40_000; Date.now() < deadline; await sleep(100)) {
      second = s.servicePid('orchestrator');
      if (second && second !== first && /orchestrator restarted/.test(s.out())) break;
    }
    expect(second, s.out()).not.toBe(first);
    process.kill(second!, 'SIGKILL');
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, s.out()).toEqual({ code: 1, signal: null });
    expect(s.out()).toMatch(/orchestrator exited \(SIGKILL\): 2 crashes within 60s is a crash loop; giving up/);
    expect((await s.survivors()).map((p) => `${p.pid} ${p.cmd}`), s.out()).toEqual([]);
  }, 150_000);
});

describe('npm start supervision of its own nats-server and PostgreSQL', () => {
  it('restarts a killed nats-server and a killed PostgreSQL on the same port and data; the stack serves again', async () => {
    const s = await startStack('launcher');
    const token = /Operator token[^\n]*\n\s*(\S+)/.exec(s.out())![1]!;
    const api = (method: string, path: string, body?: unknown) =>
      fetch(`${s.gateway}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(10_000),
      }).then(async (r) => ({ status: r.status, body: (await r.json().catch(() => null)) as Record<string, unknown> | null }), () => ({ status: 0, body: null }));
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
    const direct = (re: RegExp) => descendants(s.child.pid!).find((p) => re.test(p.cmd) && procStat(p.pid)?.ppid !== undefined && /stack\.mjs/.test(cmdline(procStat(p.pid)!.ppid)));

    const nats = direct(/nats-server/)!;
    expect(nats, s.out()).toBeDefined();
    process.kill(nats.pid, 'SIGKILL');
    for (const deadline = Date.now() + 30_000; !/nats-server restarted/.test(s.out()) && Date.now() < deadline; ) await sleep(100);
    expect(s.out()).toMatch(/nats-server exited unexpectedly \(SIGKILL\); restarting/);
    expect(await serves(), s.out()).toBe(true);

    const pg = direct(/bin\/postgres/)!;
    expect(pg, s.out()).toBeDefined();
    process.kill(pg.pid, 'SIGKILL');
    for (const deadline = Date.now() + 60_000; !/PostgreSQL restarted/.test(s.out()) && Date.now() < deadline; ) await sleep(100);
    expect(s.out()).toMatch(/PostgreSQL exited unexpectedly \(SIGKILL\); restarting/);
    expect(await serves(), s.out()).toBe(true);

    s.child.kill('SIGTERM');
    expect(await stoppedWithin(s, 45_000), s.out()).toEqual({ code: 0, signal: null });
    expect((await s.survivors()).map((p) => `${p.pid} ${p.cmd}`), s.out()).toEqual([]);
  }, 240_000);
});

describe('restart policy and the root check (pure)', () => {
  const lib = (f: string) => import(pathToFileURL(join(repoRoot, 'scripts/lib', f)).href);

  it('backs off exponentially and calls a crash loop within the window', async () => {
    const { decideRestart } = (await lib('supervise.mjs')) as {
      decideRestart: (c: number[], now: number, p: object) => { crashes: number[]; giveUp: boolean; delayMs?: number };
    };
    const policy = { limit: 4, windowMs: 60_000, baseMs: 500, maxMs: 10_000 };
    let crashes: number[] = [];
    const delays: number[] = [];
    for (const t of [0, 1_000, 2_000]) {
      const d = decideRestart(crashes, t, policy);
      expect(d.giveUp).toBe(false);
      delays.push(d.delayMs!);
      crashes = d.crashes;
    }
    expect(delays).toEqual([500, 1_000, 2_000]);
    expect(decideRestart(crashes, 3_000, policy).giveUp).toBe(true);
    // Old crashes fall out of the window: a service that crashes once an hour is restarted forever.
    expect(decideRestart(crashes, 3_000 + 61_000, policy)).toMatchObject({ giveUp: false, delayMs: 500 });
  });

  it('names the directory the postgres user cannot enter (root with a checkout in a private home)', async () => {
    const { firstUntraversableForPostgres } = (await lib('embedded-pg.mjs')) as {
      firstUntraversableForPostgres: (paths: string[], ids: { uid: number; groups: number[] } | null) => { dir: string; mode: string } | null;
    };
    const home = mkdtempSync(join(tmpdir(), 'kandev-home-'));
    cleanups.push(() => rmSync(home, { recursive: true, force: true }));
    mkdirSync(join(home, 'checkout', 'node_modules'), { recursive: true });
    chmodSync(home, 0o700);
    const ids = { uid: 4242, groups: [4242] }; // owns nothing here
    expect(firstUntraversableForPostgres([join(home, 'checkout', 'node_modules'), join(home, 'checkout', '.kandev', 'pg')], ids)).toMatchObject({ dir: home, mode: '700' });
    chmodSync(home, 0o711);
    expect(firstUntraversableForPostgres([join(home, 'checkout', 'node_modules')], ids)).toBeNull();
  });
});
