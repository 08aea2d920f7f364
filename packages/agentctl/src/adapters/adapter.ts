import type { AgentctlPermissionOutcome, AgentctlPermissionRequestedEvent, AgentctlProtocol, AgentctlStopReason } from '@kandev/contracts/agentctl';
import type { AgentExit, Termination } from '../agent-process.js';
import type { PermissionAnswerChoice, PermissionAnswerResult } from './permissions.js';

/** One usage report as a delta, before agentctl gives it an id. */
export interface UsageReport {
  cost_cents: number;
  tokens_in: number;
  tokens_cached_in: number;
  tokens_out: number;
  /** Set when the cost was derived from tokens (pricing.ts): the model, and whether it had a price. */
  model?: string;
  priced?: boolean;
}

export interface ToolCallReport {
  tool_call_id: string;
  phase: 'started' | 'completed' | 'failed';
  title: string | null;
  kind: string | null;
  text: string;
}

export type PermissionRequest = Omit<AgentctlPermissionRequestedEvent, 'type'>;

/** What an adapter reports while a turn runs; the execution turns these into stdout events. */
export interface AdapterSink {
  agentMessage(turnId: string, text: string): void;
  /** A tool call started or ended (its input or output as text). */
  toolCall(turnId: string, call: ToolCallReport): void;
  usage(turnId: string, usage: UsageReport): void;
  permissionRequested(request: PermissionRequest): void;
  permissionResolved(permissionId: string, turnId: string | null, outcome: AgentctlPermissionOutcome, optionId: string | null): void;
}

/** The protocol side of one execution: an agent process and the session/thread on it. */
export interface AgentAdapter {
  readonly protocol: AgentctlProtocol;
  /** Set once start() has spawned the process. */
  readonly pid: number;
  /** Resolves when the agent process is gone, whoever ended it. */
  readonly exited: Promise<AgentExit>;
  /** Spawns the agent and completes the handshake (ACP initialize + session/new; Codex initialize + thread/start). */
  start(): Promise<void>;
  /** Runs one turn; resolves with its normalised stop reason, rejects when the turn failed. */
  prompt(turnId: string, text: string, context?: string): Promise<AgentctlStopReason>;
  /** Asks the agent to end the in-flight turn and releases pending permission requests; does not wait for the turn. */
  cancel(): Promise<void>;
  /** Answers a permission request the agent is waiting on (or says how it already ended). */
  answerPermission(permissionId: string, choice: PermissionAnswerChoice): PermissionAnswerResult;
  /** SIGTERM, then SIGKILL after graceMs, to the agent's whole process tree. */
  stop(graceMs: number): Promise<Termination>;
  /** SIGKILL to the agent's whole process tree, synchronously (agentctl is crashing). */
  kill(): void;
}

export interface AdapterOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
  mcp: { url: string; token: string | undefined } | undefined;
  handshakeTimeoutMs: number;
  /** Nice increment of the agent's process over agentctl's (config `agentNice`). */
  agentNice: number;
}

export class AgentGoneError extends Error {
  constructor(exit: AgentExit) {
    super(`agent exited (code ${exit.code ?? 'none'}, signal ${exit.signal ?? 'none'})`);
  }
}

/** Rejects with `message` after `ms`, or when the agent exits first. */
export function withinDeadline<T>(work: Promise<T>, ms: number, message: string, exited: Promise<AgentExit>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  const gone = exited.then((exit) => Promise.reject(new AgentGoneError(exit)));
  gone.catch(() => {}); // reported through the race below; once the work wins, the agent's later exit is not this call's error
  return Promise.race([work, timeout, gone]).finally(() => clearTimeout(timer));
}

/** Resolves when `work` settles or rejects with AgentGoneError when the agent exits first. */
export function unlessAgentExits<T>(work: Promise<T>, exited: Promise<AgentExit>): Promise<T> {
  const gone = exited.then((exit) => Promise.reject(new AgentGoneError(exit)));
  gone.catch(() => {}); // reported through the race below; once the work wins, the agent's later exit is not this call's error
  return Promise.race([work, gone]);
}
