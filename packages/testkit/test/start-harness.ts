// The `npm start` supervision harness shared by the start-supervision*.test.ts files (split so
// that vitest runs their slow cases side by side): start npm start or its launcher in a process
// group of its own, watch everything below it, and clean up what a file started.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { workerAgentUidRange } from '../src/agent-uids.js';
import { repoRoot } from '../src/paths.js';
import { descendants, procAlive, type Proc } from '../src/procs.js';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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

/**
 * This process's environment without what would point `npm start` (or `npm run token`) at another
 * stack or key, plus `extra`; agent uids from this vitest worker's slice.
 */
export function startEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of [
    'DATABASE_URL',
    'KANDEV_JWT_SECRET',
    'KANDEV_OPERATOR_JWT_SECRET',
    'KANDEV_AGENT_JWT_SECRET',
    'KANDEV_SERVICES',
    'KANDEV_LOG_STDOUT',
    'NATS_USER',
    'NATS_PASS',
  ])
    delete env[k];
  return { ...env, AGENT_UID_RANGE: workerAgentUidRange(), ...extra };
}

/** A state dir PostgreSQL can use (as root the embedded server runs as `postgres`, which must enter it); removed by `runCleanups`. */
export function tempStateDir(): string {
  const base = mkdtempSync(join(tmpdir(), 'kandev-sup-'));
  chmodSync(base, 0o755);
  cleanups.push(() => rmSync(base, { recursive: true, force: true }));
  return join(base, 'state');
}

/** What a file started; each file runs them in its afterAll (`runCleanups`). */
export const cleanups: Array<() => void | Promise<void>> = [];
export async function runCleanups() {
  for (const fn of cleanups.reverse()) await fn();
}

export interface Started {
  child: ChildProcess;
  out: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Everything below the spawned process, sampled every 100 ms while it runs. */
  seen: Map<string, Proc>;
  /** Sample now, beside the 100 ms sampler (a process that just started). */
  sample(): void;
  gateway: string;
  /** Its KANDEV_STATE_DIR (the stored secrets, PostgreSQL's data). */
  stateDir: string;
  servicePid(name: string): number | undefined;
  survivors(): Promise<Proc[]>;
}

/** Start `npm start` (or the launcher directly) in a process group of its own and wait for "kandev is up". */
export async function startStack(how: 'npm' | 'launcher', extraEnv: Record<string, string> = {}): Promise<Started> {
  const state = tempStateDir();
  mkdirSync(state);
  const env = startEnv({
    KANDEV_STATE_DIR: state,
    GATEWAY_PORT: '0',
    MCP_PORT: '0',
    // Unreachable on purpose: start.mjs must spawn a nats-server of its own.
    NATS_URL: `nats://127.0.0.1:${await deadPort()}`,
    LOG_LEVEL: 'info',
    ...extraEnv,
  });
  const [cmd, args] = how === 'npm' ? ['npm', ['start', '--silent']] : [process.execPath, ['scripts/start.mjs', '--no-build']];
  // detached: its own process group, as a terminal's foreground job is.
  const child = spawn(cmd as string, args as string[], { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
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
    stateDir: state,
    sample,
    servicePid: (name) => {
      sample();
      return descendants(child.pid!).find((p) => p.cmd.includes(`services/${name}/dist/${name}.bundle.js`))?.pid;
    },
    survivors: async () => {
      clearInterval(sampler);
      let left = [...seen.values()].filter(procAlive);
      for (const deadline = Date.now() + 5_000; left.length && Date.now() < deadline; await sleep(100)) left = left.filter(procAlive);
      return left;
    },
  };
}

export async function readyz(gateway: string, deadlineMs: number): Promise<number> {
  let status = 0;
  for (const deadline = Date.now() + deadlineMs; status !== 200 && Date.now() < deadline;) {
    status = await fetch(`${gateway}/readyz`, { signal: AbortSignal.timeout(2_000) }).then(
      (r) => r.status,
      () => 0,
    );
    if (status !== 200) await sleep(200);
  }
  return status;
}

export async function stoppedWithin(s: Started, ms: number) {
  return Promise.race([s.exited, sleep(ms).then(() => null)]);
}
