import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { z } from 'zod';

/*
 * The scripted agents' observation log. When SCRIPTED_AGENT_EVENTS names a file, an agent appends one
 * JSON line per protocol message it receives and per notable moment (prompt, sigterm, permission
 * outcome, ...). Lines are written synchronously so a line is on disk before the agent answers, which
 * lets tests and benchmarks compare sub-millisecond timestamps across processes.
 */

export const AGENT_EVENTS_ENV = 'SCRIPTED_AGENT_EVENTS';

export const AgentEventKind = z.enum([
  'start',
  'recv',
  'prompt',
  'say',
  'usage',
  'cancel',
  'cancel_ignored',
  'permission_requested',
  'permission_outcome',
  'mcp_call',
  'mcp_result',
  'turn_end',
  'sigterm',
  'sigterm_ignored',
  'exit',
  'orphan',
  'read_file',
]);
export type AgentEventKind = z.infer<typeof AgentEventKind>;

export const AgentEvent = z.looseObject({
  /** Epoch milliseconds with sub-millisecond precision (`performance.timeOrigin + performance.now()`). */
  t: z.number(),
  /** CLOCK_MONOTONIC ms (see monotonicNow): compare across processes with this, not `t`. */
  mono: z.number().optional(),
  kind: AgentEventKind,
  agent: z.enum(['scripted-acp', 'scripted-codex']),
  pid: z.number().int(),
  /** Protocol method of a received message (`kind: "recv"`). */
  method: z.string().optional(),
});
export type AgentEvent = z.infer<typeof AgentEvent>;

export type AgentName = AgentEvent['agent'];

export const preciseNow = (): number => performance.timeOrigin + performance.now();

/**
 * CLOCK_MONOTONIC in milliseconds: one clock for every process on the machine, so latencies across
 * processes are exact (performance.timeOrigin is only as good as Date.now at each process's start).
 */
export const monotonicNow = (): number => Number(process.hrtime.bigint()) / 1e6;

export type AgentEventSink = (kind: AgentEventKind, fields?: Record<string, unknown>) => void;

/** A sink that appends to `path`, or does nothing when no file is configured. */
export function createAgentEventSink(agent: AgentName, path: string | undefined = process.env[AGENT_EVENTS_ENV]): AgentEventSink {
  if (!path) return () => {};
  return (kind, fields = {}) => {
    const line = JSON.stringify({ ...fields, t: preciseNow(), mono: monotonicNow(), kind, agent, pid: process.pid });
    try {
      appendFileSync(path, `${line}\n`);
    } catch (err) {
      process.stderr.write(`${JSON.stringify({ level: 'warn', msg: 'cannot append agent event', path, err: String(err) })}\n`);
    }
  };
}

/** Every complete, well-formed line of the file; a missing file is an empty log. */
export function readAgentEvents(path: string): AgentEvent[] {
  if (!existsSync(path)) return [];
  const events: AgentEvent[] = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch {
      continue; // a line being appended right now
    }
    const parsed = AgentEvent.safeParse(raw);
    if (parsed.success) events.push(parsed.data);
  }
  return events;
}

export interface WaitForAgentEventOptions {
  timeoutMs?: number;
  pollMs?: number;
}

/** Polls the file until an event matches; rejects with the events seen so far on timeout. */
export async function waitForAgentEvent(
  path: string,
  predicate: (event: AgentEvent) => boolean,
  { timeoutMs = 5000, pollMs = 10 }: WaitForAgentEventOptions = {},
): Promise<AgentEvent> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const events = readAgentEvents(path);
    const hit = events.find(predicate);
    if (hit) return hit;
    if (Date.now() >= deadline) {
      throw new Error(`no matching agent event within ${timeoutMs} ms; saw: ${events.map((e) => e.method ?? e.kind).join(', ')}`);
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}
