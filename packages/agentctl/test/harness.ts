import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { AgentctlEvent, AgentctlReadyEvent } from '@kandev/contracts/agentctl';

export const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));

export type ScriptedAgent = 'scripted-acp' | 'scripted-codex';

export interface HttpReply {
  status: number;
  body: unknown;
}

export interface RunningAgentctl {
  child: ChildProcessWithoutNullStreams;
  ready: AgentctlReadyEvent;
  url: string;
  agentPid: number;
  /** Every stdout line after `ready`, each validated against the contract. */
  events: AgentctlEvent[];
  /** Lines on stdout that are not valid events (must stay empty). */
  badLines: string[];
  eventsFile: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
  waitForEvent<T extends AgentctlEvent['type']>(
    type: T,
    match?: (e: Extract<AgentctlEvent, { type: T }>) => boolean,
    timeoutMs?: number,
  ): Promise<Extract<AgentctlEvent, { type: T }>>;
  http(method: 'GET' | 'POST', path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpReply>;
  /** Prompt that must be accepted. */
  prompt(prompt: string, turnId: string): Promise<void>;
  kill(): Promise<void>;
}

export const running: RunningAgentctl[] = [];

/** The execution secret every harness agentctl gets (AGENTCTL_SECRET); `http` sends it unless told otherwise. */
export const TEST_SECRET = 'harness-execution-secret-0123456789';

export async function killAll(): Promise<void> {
  await Promise.all(running.splice(0).map((a) => a.kill()));
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function startAgentctl(
  agent: ScriptedAgent,
  args: string[] = [],
  env: Record<string, string> = {},
  secretOnFd3?: string,
): Promise<RunningAgentctl> {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -b packages/agentctl packages/testkit)`);
  const eventsFile = join(mkdtempSync(join(tmpdir(), 'agentctl-test-')), 'agent-events.jsonl');
  const child = spawn(process.execPath, [MAIN, '--agent', agent, ...args], {
    env: { ...process.env, SCRIPTED_AGENT_EVENTS: eventsFile, AGENTCTL_AGENT_ENV: 'SCRIPTED_AGENT_EVENTS', AGENTCTL_SECRET: TEST_SECRET, ...env },
    stdio: secretOnFd3 === undefined ? ['pipe', 'pipe', 'pipe'] : ['pipe', 'pipe', 'pipe', 'pipe'],
  }) as ChildProcessWithoutNullStreams;
  if (secretOnFd3 !== undefined) (child.stdio[3] as import('node:stream').Writable).end(secretOnFd3);
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const events: AgentctlEvent[] = [];
  const badLines: string[] = [];
  const listeners = new Set<() => void>();
  let resolveReady: (ready: AgentctlReadyEvent) => void = () => {};
  const readyPromise = new Promise<AgentctlReadyEvent>((resolve) => (resolveReady = resolve));
  let sawReady = false;
  createInterface({ input: child.stdout }).on('line', (line) => {
    let parsed: ReturnType<typeof AgentctlEvent.safeParse>;
    try {
      parsed = AgentctlEvent.safeParse(JSON.parse(line));
    } catch {
      badLines.push(line);
      return;
    }
    if (!parsed.success) {
      badLines.push(line);
      return;
    }
    if (!sawReady) {
      sawReady = true;
      resolveReady(AgentctlReadyEvent.parse(parsed.data));
      return;
    }
    events.push(parsed.data);
    for (const l of listeners) l();
  });

  const ready = await Promise.race([
    readyPromise,
    exited.then(({ code }) => Promise.reject(new Error(`agentctl exited (${code}) before ready:\n${stderr}`))),
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`agentctl not ready within 15 s:\n${stderr}`)), 15_000)),
  ]);

  const instance: RunningAgentctl = {
    child,
    ready,
    url: ready.url,
    agentPid: ready.agent_pid,
    events,
    badLines,
    eventsFile,
    exited,
    stderr: () => stderr,
    waitForEvent(type, match = () => true, timeoutMs = 10_000) {
      type E = Extract<AgentctlEvent, { type: typeof type }>;
      const find = () => events.find((e): e is E => e.type === type && match(e as E));
      return new Promise((resolve, reject) => {
        const hit = find();
        if (hit) return resolve(hit);
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`no ${type} event within ${timeoutMs} ms; saw ${JSON.stringify(events)}`));
        }, timeoutMs);
        const check = () => {
          const found = find();
          if (!found) return;
          clearTimeout(timer);
          listeners.delete(check);
          resolve(found);
        };
        listeners.add(check);
      });
    },
    async http(method, path, body, headers = {}) {
      const response = await fetch(`${ready.url}${path}`, {
        method,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TEST_SECRET}`, ...headers },
        ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
      });
      const text = await response.text();
      return { status: response.status, body: text ? (JSON.parse(text) as unknown) : null };
    },
    async prompt(prompt, turnId) {
      const reply = await instance.http('POST', '/api/v1/acp/prompt', { prompt, turn_id: turnId });
      if (reply.status !== 202) throw new Error(`prompt refused: ${reply.status} ${JSON.stringify(reply.body)}`);
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
      if (isAlive(ready.agent_pid)) process.kill(ready.agent_pid, 'SIGKILL');
    },
  };
  running.push(instance);
  return instance;
}

export const script = (steps: unknown[], flags: { ignore_cancel?: boolean; ignore_sigterm?: boolean } = {}): string =>
  JSON.stringify({ script: steps, ...flags });

export async function waitUntil(check: () => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
