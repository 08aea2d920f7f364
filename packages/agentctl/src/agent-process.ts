import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { SpanStatusCode, trace } from '@opentelemetry/api';
import type { AgentSpec } from './catalogue.js';
import type { Logger } from './log.js';

export interface AgentExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Termination {
  /** `graceful`: gone before SIGKILL was needed; `killed`: it outlived the grace period. */
  how: 'graceful' | 'killed';
  exit: AgentExit;
}

const tracer = trace.getTracer('@kandev/agentctl');

/**
 * The agent's OS process: stdio pipes for the protocol, stderr re-logged as JSON, and the
 * SIGTERM → grace → SIGKILL teardown. agentctl is the only thing that signals it.
 */
export class AgentProcess {
  readonly pid: number;
  readonly exited: Promise<AgentExit>;
  private exit: AgentExit | undefined;

  private constructor(
    readonly child: ChildProcessWithoutNullStreams,
    private readonly log: Logger,
  ) {
    if (child.pid === undefined) throw new Error('agent process has no pid');
    this.pid = child.pid;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        log.info('agent exited', { agent_pid: this.pid, code, signal });
        resolve(this.exit);
      });
    });
    const lines = createInterface({ input: child.stderr, crlfDelay: Infinity });
    lines.on('line', (line) => log.info('agent stderr', { agent_pid: this.pid, line }));
    // A protocol write after the agent died must surface as a failed call, not an uncaught EPIPE.
    child.stdin.on('error', (err) => log.warn('agent stdin error', { err: err.message }));
  }

  /** Spawns the agent; rejects when the command cannot be started at all (ENOENT, EACCES). */
  static start(spec: AgentSpec, cwd: string, env: NodeJS.ProcessEnv, log: Logger): Promise<AgentProcess> {
    return new Promise((resolve, reject) => {
      const child = spawn(spec.command, spec.args, { cwd, env: { ...env, ...spec.env }, stdio: ['pipe', 'pipe', 'pipe'] });
      child.once('error', (err) => reject(new Error(`cannot start agent "${spec.name}" (${spec.command}): ${err.message}`)));
      child.once('spawn', () => {
        try {
          resolve(new AgentProcess(child, log));
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
    });
  }

  get alive(): boolean {
    return this.exit === undefined;
  }

  get exitInfo(): AgentExit | undefined {
    return this.exit;
  }

  async terminate(graceMs: number): Promise<Termination> {
    return tracer.startActiveSpan('agent.terminate', { attributes: { 'process.pid': this.pid, 'kandev.grace_ms': graceMs } }, async (span): Promise<Termination> => {
      try {
        if (this.exit) return { how: 'graceful', exit: this.exit };
        this.signal('SIGTERM');
        const graceful = await Promise.race([this.exited.then(() => true), delay(graceMs).then(() => false)]);
        if (graceful && this.exit) return { how: 'graceful', exit: this.exit };
        this.log.warn('agent outlived its grace period; killing', { agent_pid: this.pid, grace_ms: graceMs });
        this.signal('SIGKILL');
        return { how: 'killed', exit: await this.exited };
      } catch (err) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
        throw err;
      } finally {
        span.end();
      }
    });
  }

  private signal(signal: NodeJS.Signals): void {
    trace.getActiveSpan()?.addEvent('signal', { signal, 'process.pid': this.pid });
    this.log.info('signalling agent', { agent_pid: this.pid, signal });
    this.child.kill(signal);
  }
}

export const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());
