import { AgentctlEvent, type AgentctlReadyEvent } from '@kandev/contracts';
import type { Logger } from '@kandev/runtime';
import { freshBundle } from '@kandev/runtime/bundle';
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { processRef, type ProcessRef } from '@kandev/runtime/host';
import { relayAgentctlLog } from './log-relay.js';

/**
 * agentctl as one bundled file (`@kandev/agentctl/agentctl.bundle`, scripts/bundle.mjs, ADR 0051):
 * it starts with a fifth less CPU than tsc's module tree. Refused when older than any module it was
 * made from: every execution would otherwise run the agentctl of an earlier build.
 */
export function defaultAgentctlBin(): string {
  return freshBundle(fileURLToPath(import.meta.resolve('@kandev/agentctl/agentctl.bundle')));
}

export interface AgentctlSpawnOptions {
  bin: string;
  agent: string;
  executionId: string;
  sessionId: string;
  taskId: string;
  mcpUrl: string;
  mcpToken: string;
  cancelTimeoutMs: number;
  handshakeTimeoutMs: number;
  log: Logger;
  /** agentctl stops its agent when this process dies (stdin closes). */
  exitWithParent: boolean;
  /** With `exitWithParent`: agentctl also stops its agent after this long without a `heartbeat()` (0 = never). */
  ownerSilenceMs: number;
  /** Nice increment of the agent over agentctl. */
  agentNice: number;
  /** With `exitWithParent`: where agentctl logs once this process is gone (StateFile.agentctlLogPath). */
  logFile: string;
  /** The execution secret agentctl requires on its API (R-9.2); handed over on fd 3, never argv or env. */
  secret: string;
  /** The execution's own uid/gid (R-9.1); null = this process's. agentctl's agent inherits it. */
  identity: { uid: number; gid: number } | null;
  /** The agent's working directory (its task's), HOME and TMPDIR. */
  cwd: string;
  home: string;
  tmp: string;
  /** Names of this process's variables the agent also gets (AGENT_ENV_PASSTHROUGH). */
  passEnv: readonly string[];
}

export interface ProcessExit {
  code: number | null;
  signal: string | null;
}

/**
 * What agentctl gets of this process's environment: the basics (PATH, locale, proxies, CA bundles),
 * the agent catalogue, its own AGENTCTL_* settings and OTEL_* (it exports its spans). Nothing else:
 * not the JWT secret, database or NATS credentials, nor anything added later. agentctl passes its
 * agent less still (agentEnvironment in @kandev/agentctl/config).
 */
const AGENTCTL_ENV =
  /^(PATH|LANG|LANGUAGE|LC_[A-Z_]+|TZ|TERM|(HTTPS?|NO|ALL)_PROXY|(https?|no|all)_proxy|NODE_EXTRA_CA_CERTS|SSL_CERT_FILE|SSL_CERT_DIR|KANDEV_AGENT_CATALOGUE|AGENTCTL_[A-Z_]+|OTEL_[A-Z_]+)$/;
/** Never, whatever AGENT_ENV_PASSTHROUGH says: credentials of the control plane itself. */
const WITHHELD_ENV = /^(KANDEV_JWT_SECRET|KANDEV_.*SECRET.*|DATABASE_URL|NATS_USER|NATS_PASS|NATS_URL|NATS_TOKEN|NATS_CREDS|PG.*|AGENTCTL_SECRET)$/;

/** agentctl's environment (see AGENTCTL_ENV); exported for tests. */
export function agentctlEnvironment(
  source: NodeJS.ProcessEnv,
  opts: Pick<AgentctlSpawnOptions, 'mcpToken' | 'cwd' | 'home' | 'tmp' | 'passEnv' | 'identity'>,
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(source)) if (v !== undefined && !WITHHELD_ENV.test(k) && (AGENTCTL_ENV.test(k) || opts.passEnv.includes(k))) env[k] = v;
  const passed = opts.passEnv.filter((k) => env[k] !== undefined);
  // The token goes in the environment, not argv: a flag is visible to anyone who can list processes.
  env.AGENTCTL_MCP_TOKEN = opts.mcpToken;
  env.AGENTCTL_CWD = opts.cwd;
  env.AGENTCTL_AGENT_ENV = passed.join(',');
  env.HOME = opts.home;
  env.TMPDIR = opts.tmp;
  if (opts.identity) {
    env.USER = env.LOGNAME = `agent-${opts.identity.uid}`;
  }
  return env;
}

/**
 * agentctl's settings for one execution, as AGENTCTL_* variables (packages/agentctl/src/config.ts
 * reads each flag's variable). Never argv: /proc/<pid>/cmdline is readable by every uid, so flags
 * told every agent the task, session and execution ids of every other execution (issue 53), while
 * /proc/<pid>/environ needs the process's own uid. Each one is set, empty when unused, so a
 * variable of this service's own environment that AGENTCTL_ENV lets through never stands in for
 * it. agentctl's agent gets none of them (agentEnvironment drops AGENTCTL_*).
 */
export function agentctlSettings(
  opts: Pick<
    AgentctlSpawnOptions,
    | 'agent'
    | 'executionId'
    | 'sessionId'
    | 'taskId'
    | 'mcpUrl'
    | 'cancelTimeoutMs'
    | 'handshakeTimeoutMs'
    | 'agentNice'
    | 'exitWithParent'
    | 'ownerSilenceMs'
    | 'logFile'
  >,
): Record<string, string> {
  return {
    AGENTCTL_AGENT: opts.agent,
    AGENTCTL_PORT: '0',
    AGENTCTL_HOST: '',
    AGENTCTL_EXECUTION_ID: opts.executionId,
    AGENTCTL_SESSION_ID: opts.sessionId,
    AGENTCTL_TASK_ID: opts.taskId,
    AGENTCTL_MCP_URL: opts.mcpUrl,
    AGENTCTL_CANCEL_TIMEOUT_MS: String(Math.max(1, opts.cancelTimeoutMs)),
    AGENTCTL_HANDSHAKE_TIMEOUT_MS: String(Math.max(1, Math.min(opts.handshakeTimeoutMs, 600_000))),
    AGENTCTL_AGENT_NICE: String(Math.min(19, Math.max(0, opts.agentNice))),
    AGENTCTL_SECRET_FD: '3',
    AGENTCTL_EXIT_WITH_PARENT: opts.exitWithParent ? '1' : '',
    AGENTCTL_OWNER_SILENCE_MS: opts.exitWithParent ? String(Math.min(opts.ownerSilenceMs, 3_600_000)) : '',
    AGENTCTL_LOG_FILE: opts.exitWithParent ? opts.logFile : '',
  };
}

export type AgentctlLine = Exclude<AgentctlEvent, AgentctlReadyEvent>;

/**
 * One agentctl child process. Its first stdout line is `ready`; every later line is an event that
 * is buffered until a listener is attached, so nothing said between `ready` and the relay being
 * wired up is lost.
 */
export class AgentctlProcess {
  readonly ref: ProcessRef;
  readonly ready: Promise<AgentctlReadyEvent>;
  readonly exited: Promise<ProcessExit>;
  /** After `exited`, once stdout and stderr are drained: every line has been delivered. */
  readonly closed: Promise<ProcessExit>;
  private exit: ProcessExit | undefined;
  private listener: ((ev: AgentctlLine) => void) | undefined;
  private readonly pending: AgentctlLine[] = [];
  private readonly stderrLines: string[] = [];

  private constructor(
    private readonly child: ChildProcessByStdio<Writable | null, Readable, Readable>,
    private readonly log: Logger,
    readyTimeoutMs: number,
  ) {
    this.ref = processRef(child.pid!);
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      });
    });
    this.closed = new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
    let resolveReady!: (r: AgentctlReadyEvent) => void;
    let rejectReady!: (e: Error) => void;
    this.ready = new Promise((res, rej) => {
      resolveReady = res;
      rejectReady = rej;
    });
    this.ready.catch(() => undefined); // a handshake failure is reported to whoever awaits `ready`; unawaited, it must not crash the service
    const timer = setTimeout(() => rejectReady(new Error(`agentctl not ready within ${readyTimeoutMs} ms`)), readyTimeoutMs);
    void this.exited.then((x) => {
      clearTimeout(timer);
      rejectReady(new Error(`agentctl exited before ready (code ${x.code}, signal ${x.signal})${this.stderrTail() ? `: ${this.stderrTail()}` : ''}`));
    });

    createInterface({ input: child.stdout, crlfDelay: Infinity }).on('line', (line) => {
      if (!line.trim()) return;
      let parsed;
      try {
        parsed = AgentctlEvent.safeParse(JSON.parse(line));
      } catch {
        log.warn({ line: line.slice(0, 500) }, 'agentctl wrote a non-JSON line');
        return;
      }
      if (!parsed.success) {
        log.warn({ line: line.slice(0, 500) }, 'agentctl event breaks its contract; ignored');
        return;
      }
      const ev = parsed.data;
      if (ev.type === 'ready') {
        clearTimeout(timer);
        resolveReady(ev);
        return;
      }
      if (this.listener) this.listener(ev);
      else this.pending.push(ev);
    });
    createInterface({ input: child.stderr, crlfDelay: Infinity }).on('line', (line) => {
      this.stderrLines.push(line);
      if (this.stderrLines.length > 20) this.stderrLines.shift();
      relayAgentctlLog(log, line);
    });
  }

  static spawn(opts: AgentctlSpawnOptions): AgentctlProcess {
    // Settings in the environment, not argv (agentctlSettings says why): the command line is the
    // bundle's path alone.
    const env = { ...agentctlEnvironment(process.env, opts), ...agentctlSettings(opts) };
    const args = [opts.bin];
    // Own process group: a terminal's Ctrl-C reaches the services, and this service alone decides
    // when an agent dies (R-6.1).
    // stdin is a pipe that carries only heartbeats: it closes when this process dies, however it
    // dies, and agentctl then stops its agent (--exit-with-parent); it goes silent when this process
    // freezes or hangs, and agentctl stops its agent after --owner-silence-ms.
    // fd 3 carries the execution secret: written once and closed; agentctl reads it to the end and
    // closes its side before its agent exists. uid/gid: the execution's own (R-9.1); agentctl
    // spawns its agent with what it has, so the agent runs under the same.
    const child = spawn(process.execPath, args, {
      stdio: [opts.exitWithParent ? 'pipe' : 'ignore', 'pipe', 'pipe', 'pipe'],
      env,
      cwd: opts.cwd,
      detached: true,
      ...(opts.identity ? { uid: opts.identity.uid, gid: opts.identity.gid } : {}),
    }) as unknown as ChildProcessByStdio<Writable | null, Readable, Readable>;
    if (child.pid === undefined) throw new Error('agentctl could not be spawned');
    const secretPipe = child.stdio[3] as Writable;
    secretPipe.on('error', () => undefined);
    secretPipe.end(`${opts.secret}\n`);
    // A heartbeat written as agentctl dies fails with EPIPE: its exit is handled elsewhere.
    child.stdin?.on('error', () => undefined);
    child.once('error', (e) => opts.log.error({ err: e }, 'agentctl process error'));
    return new AgentctlProcess(child, opts.log, opts.handshakeTimeoutMs);
  }

  get pid(): number {
    return this.ref.pid;
  }

  get exitInfo(): ProcessExit | undefined {
    return this.exit;
  }

  /** Attach the event relay; buffered events are delivered first, in order. */
  listen(fn: (ev: AgentctlLine) => void): void {
    this.listener = fn;
    for (const ev of this.pending.splice(0)) fn(ev);
  }

  stderrTail(): string {
    return this.stderrLines.slice(-3).join(' | ').slice(0, 1000);
  }

  /** Proof of life for agentctl (--owner-silence-ms): one byte down its stdin pipe. */
  heartbeat(): void {
    const stdin = this.child.stdin;
    if (!this.exit && stdin && stdin.writable && stdin.writableLength === 0) stdin.write('\n');
  }
}
