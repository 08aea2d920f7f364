import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { AgentEventSink } from './events.js';
import { McpToolCaller, type McpTarget } from './mcp.js';
import { parsePrompt, type ScriptStep, type Usage } from './script.js';

/*
 * The protocol-neutral half of a scripted agent: parses a prompt, runs its steps, and honours
 * cancellation. Each agent supplies a TurnIO that maps the effects onto its own wire protocol.
 */

export interface TurnIO {
  say(text: string): Promise<void>;
  usage(usage: Usage): Promise<void>;
  /** Asks the client for permission and resolves with the outcome as a short word (`allow`, `cancelled`, `decline`, ...). */
  permission(toolCallId: string, text: string): Promise<string>;
  toolCallStarted(toolCallId: string, title: string): Promise<void>;
  toolCallFinished(toolCallId: string, status: 'completed' | 'failed'): Promise<void>;
}

export interface TurnEnvironment {
  io: TurnIO;
  log: AgentEventSink;
  mcp: McpTarget | undefined;
  mcpCaller: McpToolCaller;
  ignoreSigterm(): void;
  /** Context blocks that came before the instruction (e.g. who sent the message). */
  context?: string | undefined;
}

export type TurnResult = { status: 'completed' } | { status: 'cancelled' } | { status: 'failed'; message: string };

class TurnCancelled extends Error {
  constructor() {
    super('turn cancelled');
  }
}

/**
 * A prompt may arrive as several text blocks: the client's context first (who sent the message),
 * the instruction last. The script grammar applies to the last block.
 */
export function splitPromptBlocks(blocks: string[]): { text: string; context: string | undefined } {
  if (blocks.length <= 1) return { text: blocks[0] ?? '', context: undefined };
  return { text: blocks.at(-1)!, context: blocks.slice(0, -1).join('\n') };
}

/** One prompt turn; `cancel()` ends it at once unless its script asked to ignore cancels. */
export class ScriptedTurn {
  readonly ignoreCancel: boolean;
  private readonly steps: ScriptStep[];
  private readonly abort = new AbortController();
  private readonly ignoreSigterm: boolean;

  constructor(
    private readonly promptText: string,
    private readonly env: TurnEnvironment,
    /** The protocol's id for the turn where it has one (Codex); ACP turns get a fresh one. */
    readonly id: string = randomUUID(),
  ) {
    const parsed = parsePrompt(promptText);
    switch (parsed.kind) {
      case 'echo':
        this.steps = [{ say: parsed.text }];
        this.ignoreCancel = false;
        this.ignoreSigterm = false;
        break;
      case 'invalid':
        this.steps = [{ say: `invalid script: ${parsed.message}` }];
        this.ignoreCancel = false;
        this.ignoreSigterm = false;
        break;
      case 'script':
        this.steps = parsed.script.script;
        this.ignoreCancel = parsed.script.ignore_cancel;
        this.ignoreSigterm = parsed.script.ignore_sigterm;
        break;
    }
  }

  get cancelled(): boolean {
    return this.abort.signal.aborted;
  }

  /** Returns false when the script ignores cancels (the turn keeps running). */
  cancel(): boolean {
    if (this.ignoreCancel) {
      this.env.log('cancel_ignored', { turn: this.id });
      return false;
    }
    this.abort.abort(new TurnCancelled());
    return true;
  }

  async run(): Promise<TurnResult> {
    this.env.log('prompt', { turn: this.id, text: this.promptText, ...(this.env.context ? { context: this.env.context } : {}) });
    if (this.ignoreSigterm) this.env.ignoreSigterm();
    const cancelled = new Promise<TurnResult>((resolve) => {
      const settle = () => resolve({ status: 'cancelled' });
      if (this.abort.signal.aborted) settle();
      else this.abort.signal.addEventListener('abort', settle, { once: true });
    });
    // A step that is not abort-aware (a pending permission) must not hold the turn open after a cancel.
    const result = await Promise.race([this.runSteps(), cancelled]);
    this.env.log('turn_end', { turn: this.id, status: result.status });
    return result;
  }

  private async runSteps(): Promise<TurnResult> {
    try {
      for (const step of this.steps) {
        this.throwIfCancelled();
        await this.runStep(step);
      }
      this.throwIfCancelled();
      return { status: 'completed' };
    } catch (err) {
      if (this.cancelled || err instanceof TurnCancelled) return { status: 'cancelled' };
      return { status: 'failed', message: err instanceof Error ? err.message : String(err) };
    }
  }

  private throwIfCancelled(): void {
    if (this.abort.signal.aborted) throw new TurnCancelled();
  }

  private async runStep(step: ScriptStep): Promise<void> {
    const { io, log } = this.env;
    if ('sleep_ms' in step) {
      await sleep(step.sleep_ms, this.abort.signal);
    } else if ('busy_ms' in step) {
      await busy(step.busy_ms, this.abort.signal);
    } else if ('say' in step) {
      log('say', { turn: this.id, text: step.say });
      await io.say(step.say);
    } else if ('usage' in step) {
      log('usage', { turn: this.id, ...step.usage });
      await io.usage(step.usage);
    } else if ('permission' in step) {
      const toolCallId = `perm-${randomUUID()}`;
      await io.toolCallStarted(toolCallId, step.permission);
      log('permission_requested', { turn: this.id, tool_call_id: toolCallId, text: step.permission });
      const outcome = await io.permission(toolCallId, step.permission);
      log('permission_outcome', { turn: this.id, tool_call_id: toolCallId, outcome, normalized: normalizeOutcome(outcome) });
      this.throwIfCancelled();
      await io.toolCallFinished(toolCallId, normalizeOutcome(outcome) === 'allowed' ? 'completed' : 'failed');
      await io.say(`permission: ${outcome}`);
    } else if ('ask' in step) {
      const questions = step.ask.map((q, i) => ({ ...q, id: q.id ?? `q${i + 1}` }));
      const text = await this.callTool('ask_user_questions', { questions });
      await io.say(text);
    } else if ('mcp' in step) {
      const text = await this.callTool(step.mcp.tool, step.mcp.args);
      await io.say(text);
    } else if ('orphan' in step) {
      const pid = await orphan(step.orphan.ignore_sigterm);
      log('orphan', { turn: this.id, orphan_pid: pid });
      await io.say(`orphan ${pid}`);
    } else if ('read_file' in step) {
      const text = await readFileStep(step.read_file);
      log('read_file', { turn: this.id, path: step.read_file });
      await io.say(text);
    } else {
      throw new Error(step.fail);
    }
  }

  private async callTool(tool: string, args: Record<string, unknown>): Promise<string> {
    const { io, log, mcp, mcpCaller } = this.env;
    if (!mcp) throw new Error(`no MCP server configured for tool ${tool}`);
    const toolCallId = `mcp-${randomUUID()}`;
    await io.toolCallStarted(toolCallId, `mcp: ${tool}`);
    log('mcp_call', { turn: this.id, tool, url: mcp.url, with_token: mcp.token !== undefined });
    try {
      const result = await mcpCaller.call(mcp, tool, args, this.abort.signal);
      log('mcp_result', { turn: this.id, tool, is_error: result.isError, text: result.text });
      await io.toolCallFinished(toolCallId, result.isError ? 'failed' : 'completed');
      return result.isError ? `mcp error: ${result.text}` : result.text;
    } catch (err) {
      if (!this.cancelled) await io.toolCallFinished(toolCallId, 'failed');
      throw err;
    }
  }
}

/** The `read_file` step's answer: the file's content, or the error code that kept the agent from it. */
async function readFileStep(path: string): Promise<string> {
  const full = path.startsWith('~/') ? join(homedir(), path.slice(2)) : path;
  try {
    return `read_file ${path}: ${await readFile(full, 'utf8')}`;
  } catch (e) {
    return `read_file ${path}: error ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
  }
}

/** One vocabulary over ACP option ids / outcomes and Codex decisions, for tests that cover both. */
function normalizeOutcome(outcome: string): 'allowed' | 'denied' | 'cancelled' | 'other' {
  if (outcome === 'allow' || outcome === 'accept' || outcome === 'acceptForSession') return 'allowed';
  if (outcome === 'reject' || outcome === 'decline') return 'denied';
  if (outcome === 'cancelled' || outcome === 'cancel') return 'cancelled';
  return 'other';
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new TurnCancelled());
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(new TurnCancelled());
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** A subprocess that keeps one core busy for `ms` (a build, a test run); killed on cancel. */
function busy(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new TurnCancelled());
    const child = spawn(process.execPath, ['-e', `const end = Date.now() + ${ms}; while (Date.now() < end);`], { stdio: 'ignore' });
    const onAbort = () => {
      child.kill('SIGKILL');
      reject(new TurnCancelled());
    };
    signal.addEventListener('abort', onAbort, { once: true });
    child.once('exit', () => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    });
    child.once('error', (err) => {
      signal.removeEventListener('abort', onAbort);
      reject(err);
    });
  });
}

/**
 * A process outside the agent's tree: an intermediate node starts it detached (a session and
 * process group of its own), prints its pid and exits, so it is re-parented away from the agent.
 */
function orphan(ignoreSigterm: boolean): Promise<number> {
  const inner = `${ignoreSigterm ? "process.on('SIGTERM', () => {});" : ''} setInterval(() => {}, 1 << 30);`;
  const middle = `const c = require('node:child_process').spawn(process.execPath, ['-e', ${JSON.stringify(inner)}], { detached: true, stdio: 'ignore' }); c.unref(); process.stdout.write(String(c.pid)); process.exit(0);`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', middle], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.once('error', reject);
    child.once('exit', () => (/^\d+$/.test(out) ? resolve(Number(out)) : reject(new Error(`orphan did not start: ${out}`))));
  });
}

/** Installs the SIGTERM behaviour: log it, then die by the signal unless a script asked to ignore it. */
export function installSigtermHandling(log: AgentEventSink, beforeExit: () => void): { ignore(): void } {
  let ignoring = false;
  const onSigterm = () => {
    if (ignoring) {
      log('sigterm_ignored');
      return;
    }
    log('sigterm');
    beforeExit();
    process.off('SIGTERM', onSigterm);
    // Re-raise so the parent sees the process end by SIGTERM rather than a made-up exit code.
    process.kill(process.pid, 'SIGTERM');
  };
  process.on('SIGTERM', onSigterm);
  return {
    ignore() {
      ignoring = true;
    },
  };
}

export function agentLogger(agent: string): (level: 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void {
  return (level, msg, fields = {}) => {
    process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, agent, pid: process.pid, msg, ...fields })}\n`);
  };
}
