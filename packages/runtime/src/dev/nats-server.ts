import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';

export interface NatsServerHandle {
  url: string;
  port: number;
  pid: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

export const NATS_INSTALL_HINT =
  'nats-server not found on PATH. Install it (Debian: `apt-get install nats-server`; or download a release binary) and make sure `nats-server --version` works.';

export function natsServerAvailable(): boolean {
  return spawnSync('nats-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

/**
 * Start a real nats-server with JetStream on a random port (`-p -1`), storing under storeDir.
 * Resolves once it listens; rejects with an install hint when the binary is missing.
 */
export async function spawnNatsServer(opts: { storeDir: string; port?: number; configFile?: string; extraArgs?: string[] }): Promise<NatsServerHandle> {
  if (!natsServerAvailable()) throw new Error(NATS_INSTALL_HINT);
  mkdirSync(opts.storeDir, { recursive: true });
  const args = opts.configFile
    ? ['-c', opts.configFile, '-sd', opts.storeDir, ...(opts.port !== undefined ? ['-p', String(opts.port)] : [])]
    : ['-a', '127.0.0.1', '-p', String(opts.port ?? -1), '-js', '-sd', opts.storeDir];
  const child = spawn('nats-server', [...args, ...(opts.extraArgs ?? [])], { stdio: ['ignore', 'pipe', 'pipe'] });
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`nats-server did not start within 10s:\n${buf}`)), 10_000);
    const onData = (d: Buffer) => {
      buf += d.toString();
      const m = /Listening for client connections on [^\s]*:(\d+)/.exec(buf);
      if (m) {
        clearTimeout(timer);
        child.stderr?.off('data', onData);
        child.stderr?.resume();
        resolve(Number(m[1]));
      }
    };
    child.stderr?.on('data', onData);
    child.stdout?.resume();
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`nats-server exited with ${code}:\n${buf}`));
    });
  });
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    pid: child.pid!,
    process: child,
    stop: () => stopChild(child),
  };
}

/** SIGTERM, then SIGKILL after 5 s; resolves when the process is gone. */
export function stopChild(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
