import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { stopChild } from './nats-server.js';

export interface ServiceProcess {
  name: string;
  process: ChildProcess;
  pid: number;
  urls: Record<string, string>;
  stop(graceMs?: number): Promise<void>;
}

/**
 * V8 CPU profiles of the services named in KANDEV_CPU_PROF (comma-separated, or `all`), written on
 * exit to KANDEV_CPU_PROF_DIR/<service>/ (default ./cpu-profiles), sampled every
 * KANDEV_CPU_PROF_INTERVAL_US (V8's default, 1000, is too coarse for one 10 ms call). Node refuses
 * --cpu-prof in NODE_OPTIONS, so it is passed here; docs/history/fast-paths-rounds.md reads one taken during the bench.
 */
export function profilingArgs(name: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const wanted = (env.KANDEV_CPU_PROF ?? '').split(',').map((s) => s.trim());
  if (!wanted.includes(name) && !wanted.includes('all')) return [];
  const us = Number(env.KANDEV_CPU_PROF_INTERVAL_US);
  // Node refuses to start on a bad value: one that is not a positive whole number is left to V8's default.
  const interval = Number.isInteger(us) && us > 0 ? [`--cpu-prof-interval=${us}`] : [];
  return ['--cpu-prof', `--cpu-prof-dir=${env.KANDEV_CPU_PROF_DIR ?? 'cpu-profiles'}/${name}`, ...interval];
}

/**
 * Run a compiled service entry point as its own process and resolve once it logs
 * "<name> started" (with its URLs). Its JSON log lines are forwarded to `onLog`.
 */
export async function spawnServiceProcess(opts: {
  name: string;
  entry: string;
  env: NodeJS.ProcessEnv;
  onLog?: (line: string) => void;
  startTimeoutMs?: number;
}): Promise<ServiceProcess> {
  const child = spawn(process.execPath, [...profilingArgs(opts.name), opts.entry], { env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
  const tail: string[] = [];
  const remember = (line: string) => {
    tail.push(line);
    if (tail.length > 40) tail.shift();
    opts.onLog?.(line);
  };
  createInterface({ input: child.stderr! }).on('line', remember);
  const urls = await new Promise<Record<string, string>>((resolve, reject) => {
    const timer = setTimeout(() => {
      // A service that never came up must not linger: nobody else holds a handle to it.
      child.kill('SIGKILL');
      reject(new Error(`${opts.name} did not start in time:\n${tail.join('\n')}`));
    }, opts.startTimeoutMs ?? 20_000);
    const rl = createInterface({ input: child.stdout! });
    let done = false;
    rl.on('line', (line) => {
      remember(line);
      if (done) return;
      try {
        const rec = JSON.parse(line) as { msg?: string; urls?: Record<string, string> };
        if (rec.msg === `${opts.name} started`) {
          done = true;
          clearTimeout(timer);
          resolve(rec.urls ?? {});
        }
      } catch {
        /* not a JSON log line */
      }
    });
    child.once('exit', (code) => {
      if (done) return;
      clearTimeout(timer);
      reject(new Error(`${opts.name} exited with ${code} during start:\n${tail.join('\n')}`));
    });
  });
  return { name: opts.name, process: child, pid: child.pid!, urls, stop: (g) => stopChild(child, g) };
}
