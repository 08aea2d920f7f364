import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export type ScriptedAgentName = 'scripted-acp' | 'scripted-codex';

export function agentEntry(agent: ScriptedAgentName): string {
  const path = fileURLToPath(new URL(`../../dist/agents/${agent}.js`, import.meta.url));
  if (!existsSync(path)) throw new Error(`${path} is missing: build testkit first (npx tsc -b packages/testkit)`);
  return path;
}

export interface SpawnedAgent {
  child: ChildProcessWithoutNullStreams;
  eventsFile: string;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(): Promise<void>;
}

export function spawnAgent(agent: ScriptedAgentName, env: Record<string, string> = {}): SpawnedAgent {
  const eventsFile = join(mkdtempSync(join(tmpdir(), 'scripted-agent-')), 'events.jsonl');
  const child = spawn(process.execPath, [agentEntry(agent)], {
    env: { ...process.env, SCRIPTED_AGENT_EVENTS: eventsFile, KANDEV_MCP_URL: '', KANDEV_MCP_TOKEN: '', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    eventsFile,
    stderr: () => stderr,
    exited,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
