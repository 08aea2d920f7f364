import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import type { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { LAUNCH_WORKERS } from './curve.js';

/*
 * The floor of a launch: agentctl and its scripted agent spawned directly, as the lifecycle spawns
 * them (same binary and flags, detached, stdin a pipe), `LAUNCH_WORKERS` at a time, each counted
 * once agentctl prints its `ready` line (it has spawned the agent and finished the protocol
 * handshake). No gateway, orchestrator, lifecycle, NATS or PostgreSQL: what a launch through the
 * control plane costs beyond this is ours.
 */

export type ScriptedAgent = 'scripted-acp' | 'scripted-codex';

export interface LaunchFloor {
  count: number;
  workers: number;
  ms: number;
  perSec: number;
}

// The file the lifecycle spawns (its defaultAgentctlBin): agentctl's bundle.
const agentctlBin = fileURLToPath(import.meta.resolve('@kandev/agentctl/agentctl.bundle'));

function startPair(agent: ScriptedAgent): Promise<ChildProcess> {
  const args = [
    agentctlBin,
    '--agent',
    agent,
    '--port',
    '0',
    '--execution-id',
    randomUUID(),
    '--session-id',
    randomUUID(),
    '--task-id',
    randomUUID(),
    '--mcp-url',
    'http://127.0.0.1:9/mcp',
    '--cancel-timeout-ms',
    '5000',
    '--handshake-timeout-ms',
    '60000',
    '--agent-nice',
    '10',
    '--secret-fd',
    '3',
  ];
  const child = spawn(process.execPath, args, {
    stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
    detached: true,
    env: { ...process.env, AGENTCTL_MCP_TOKEN: 'floor', LOG_LEVEL: 'warn' },
  });
  child.stderr!.resume();
  // agentctl refuses to start without its execution secret, read from fd 3 as lifecycle hands it over.
  (child.stdio[3] as Writable).end(`${randomBytes(32).toString('base64url')}\n`);
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (l) => {
      if (l.includes('"ready"')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`agentctl exited before ready (code ${code})`)));
  });
}

export async function launchFloor(count: number, agent: ScriptedAgent = 'scripted-acp'): Promise<LaunchFloor> {
  const children: ChildProcess[] = [];
  let left = count;
  const t = performance.now();
  try {
    await Promise.all(
      Array.from({ length: LAUNCH_WORKERS }, async () => {
        while (left-- > 0) children.push(await startPair(agent));
      }),
    );
    const ms = performance.now() - t;
    return { count, workers: LAUNCH_WORKERS, ms, perSec: (count / ms) * 1000 };
  } finally {
    // SIGTERM: agentctl stops its agent's tree and exits (a SIGKILL would leave the agent behind).
    for (const c of children) {
      try {
        process.kill(c.pid!, 'SIGTERM');
      } catch {
        /* gone */
      }
    }
    await Promise.all(children.filter((c) => c.exitCode === null && c.signalCode === null).map((c) => new Promise((r) => c.once('exit', r))));
  }
}
