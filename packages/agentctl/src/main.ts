#!/usr/bin/env node
// First: before any module builds a schema (zod-jitless.ts says why).
import './zod-jitless.js';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import type { AdapterOptions, AdapterSink, AgentAdapter } from './adapters/adapter.js';
import { CatalogueError, resolveAgent, type AgentSpec } from './catalogue.js';
import { ConfigError, agentEnvironment, describeConfig, loadConfig, readExecutionSecret, type AgentctlConfig } from './config.js';
import { EventStream } from './events.js';
import type { AgentctlAgentExitedEvent } from '@kandev/contracts/agentctl';
import { Execution } from './execution.js';
import { createHttpServer } from './http.js';
import { createLogger, DivertableOutput, errorMessage, type Logger } from './log.js';
import { startTracing } from './tracing.js';

/*
 * agentctl: one process per execution, next to its agent. It spawns the agent, completes the
 * protocol handshake, serves the loopback HTTP API and reports on stdout (one `ready` line, then
 * NDJSON events). It exits once its agent is gone, whether the agent ended or was stopped.
 */

/** Grace period when agentctl itself is asked to terminate. */
const SIGNAL_GRACE_MS = 2000;

async function main(): Promise<void> {
  const { config, secret } = configureOrExit();
  // After the configuration: the execution id is the resource's service.instance.id. Nothing is
  // traced before it (a configuration error exits at once).
  const stopTracing = await startTracing(config.executionId);
  const logOutput = new DivertableOutput();
  const log = createLogger(
    { service: 'agentctl', ...(config.executionId ? { execution_id: config.executionId } : {}), ...(config.taskId ? { task_id: config.taskId } : {}) },
    config.logLevel,
    logOutput,
  );
  log.info({ config: describeConfig(config) }, 'starting');
  const spec = agentOrExit(config, log);
  // When the parent dies its end of stderr goes with it; a log write must not then crash agentctl
  // (and skip the graceful stop of the agent's tree that the closed stdin starts).
  process.stderr.on('error', () => undefined);
  const { execution, events } = await startAgentOrExit(config, spec, log);

  let server: Server | undefined;
  const leave = leaveAfterAgent(execution, events, log, stopTracing, () => server);
  server = createHttpServer(execution, log, { secret, onStopped: () => void leave() });
  watchTheAgent(execution, log, leave);
  const stopOnOwnAccount = (stoppedBy: StoppedBy) => {
    void execution.stop(SIGNAL_GRACE_MS).then(
      () => leave(stoppedBy),
      (err: unknown) => {
        log.error({ err: errorMessage(err) }, 'stop failed');
        process.exit(1);
      },
    );
  };
  const onSignal = (signal: NodeJS.Signals) => {
    log.info({ signal, grace_ms: SIGNAL_GRACE_MS }, 'signal received; stopping the agent');
    stopOnOwnAccount('signal');
  };
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  if (config.exitWithParent) watchTheOwner(config, log, logOutput, stopOnOwnAccount);

  await new Promise<void>((resolve, reject) => {
    server!.once('error', reject);
    server!.listen(config.port, config.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  const url = `http://${host}:${port}`;
  events.emit({ type: 'ready', url, agent_pid: execution.adapter.pid, protocol: spec.protocol });
  log.info({ url, agent: spec.name, agent_pid: execution.adapter.pid, protocol: spec.protocol }, 'ready');
}

type StoppedBy = NonNullable<AgentctlAgentExitedEvent['stopped_by']>;

/** The configuration and the execution's secret, or exit 2 with the reason on stderr. */
function configureOrExit(): { config: AgentctlConfig; secret: string } {
  try {
    const config = loadConfig(process.argv.slice(2), process.env);
    // Before the agent exists: the pipe's descriptor must not be inherited by it.
    return { config, secret: readExecutionSecret(config) };
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level: 'error', msg: 'invalid configuration', err: err.message })}\n`);
    process.exit(2);
  }
}

/** The agent the configuration names, or exit 2 saying why it cannot be resolved. */
function agentOrExit(config: AgentctlConfig, log: Logger): AgentSpec {
  try {
    return resolveAgent(config.agent, process.env);
  } catch (err) {
    if (!(err instanceof CatalogueError)) throw err;
    log.error({ err: err.message }, 'cannot resolve agent');
    process.exit(2);
  }
}

/** Spawn the agent and complete its protocol handshake; a failed handshake stops what was spawned and exits 1. */
async function startAgentOrExit(config: AgentctlConfig, spec: AgentSpec, log: Logger): Promise<{ execution: Execution; events: EventStream }> {
  const adapterOptions: AdapterOptions = {
    cwd: config.cwd,
    env: agentEnvironment(process.env, config.agentEnv),
    mcp: config.mcpUrl ? { url: config.mcpUrl, token: config.mcpToken } : undefined,
    handshakeTimeoutMs: config.handshakeTimeoutMs,
    agentNice: config.agentNice,
  };
  const events = new EventStream(process.stdout, log);
  const createAdapter = await adapterFactory(spec.protocol);
  const execution = new Execution(
    (sink): AgentAdapter => createAdapter(spec, adapterOptions, sink, log),
    events,
    { executionId: config.executionId, cancelTimeoutMs: config.cancelTimeoutMs },
    log,
  );
  try {
    await execution.adapter.start();
  } catch (err) {
    log.error({ agent: spec.name, err: errorMessage(err) }, 'agent handshake failed');
    await execution.adapter.stop(500).catch((e: unknown) => log.warn({ err: errorMessage(e) }, 'agent stop after a failed handshake failed')); // exiting with 1 either way
    process.exit(1);
  }
  return { execution, events };
}

/** Reports the agent's end (and who ended it, if agentctl did on its own), then leaves: there is nothing left to control. Runs once. */
function leaveAfterAgent(
  execution: Execution,
  events: EventStream,
  log: Logger,
  stopTracing: () => Promise<void>,
  server: () => Server | undefined,
): (stoppedBy?: StoppedBy) => Promise<void> {
  let exiting = false;
  return async (stoppedBy) => {
    if (exiting) return;
    exiting = true;
    const exit = await execution.adapter.exited;
    events.emit({ type: 'agent_exited', code: exit.code, signal: exit.signal, ...(stoppedBy ? { stopped_by: stoppedBy } : {}) });
    await events.flush();
    server()?.close();
    server()?.closeAllConnections();
    log.info('agentctl exiting');
    // Export what is buffered (the stop's spans, with the signal) before leaving.
    await stopTracing().catch(() => undefined); // spans that cannot be exported now are lost either way; the exit must not wait on them
    process.exit(0);
  };
}

/** The agent ending on its own, and agentctl crashing: neither may leave the agent's processes behind. */
function watchTheAgent(execution: Execution, log: Logger, leave: () => Promise<void>): void {
  // A crash must not leave the agent behind: nobody else knows its pid well enough to clean it up.
  process.once('uncaughtException', (err) => {
    log.error({ err: errorMessage(err) }, 'agentctl crashed; killing the agent');
    // The whole tree: a shell command the agent started may run in a session of its own.
    execution.adapter.kill();
    process.exit(1);
  });
  void execution.adapter.exited.then(async (exit) => {
    if (execution.isStopping) return; // the stop path reports and exits after its HTTP answer
    log.warn({ code: exit.code, signal: exit.signal }, 'agent exited on its own');
    // What it started (a shell command, an MCP server) must not outlive it.
    await execution.adapter.stop(SIGNAL_GRACE_MS).catch((err: unknown) => log.warn({ err: errorMessage(err) }, 'sweeping the agent tree failed'));
    await execution.agentExited();
    await leave();
  });
}

/** The owner (lifecycle) gone (stdin closed) or silent (no heartbeat within the bound): the agent is stopped, once. */
function watchTheOwner(config: AgentctlConfig, log: Logger, logOutput: DivertableOutput, stop: (stoppedBy: StoppedBy) => void): void {
  let parentGone = false;
  const onParentGone = (stoppedBy: 'owner_gone' | 'owner_silent', fields: Record<string, unknown> = {}) => {
    if (parentGone) return;
    parentGone = true;
    // Its end of stderr went with it: what the stop says from here on goes to the file, if any.
    if (stoppedBy === 'owner_gone' && config.logFile) logOutput.divertTo(config.logFile);
    log.warn(
      { ...fields, grace_ms: SIGNAL_GRACE_MS },
      stoppedBy === 'owner_gone' ? 'parent is gone (stdin closed); stopping the agent' : 'parent is silent (frozen or hung); stopping the agent',
    );
    stop(stoppedBy);
  };
  process.stdin.once('end', () => onParentGone('owner_gone'));
  process.stdin.once('error', () => onParentGone('owner_gone'));
  if (config.ownerSilenceMs > 0)
    watchOwnerHeartbeat(config.ownerSilenceMs, (silentMs) => onParentGone('owner_silent', { silent_ms: silentMs, bound_ms: config.ownerSilenceMs }));
  process.stdin.resume();
}

/**
 * Only the adapter of the agent's protocol is loaded: the ACP SDK alone was about a third of
 * agentctl's start-up CPU, paid by every Codex execution that never uses it.
 */
async function adapterFactory(
  protocol: AgentSpec['protocol'],
): Promise<(spec: AgentSpec, options: AdapterOptions, sink: AdapterSink, log: Logger) => AgentAdapter> {
  if (protocol === 'acp') {
    const { AcpAdapter } = await import('./adapters/acp.js');
    return (spec, options, sink, log) => new AcpAdapter(spec, options, sink, log);
  }
  const { CodexAdapter } = await import('./adapters/codex.js');
  return (spec, options, sink, log) => new CodexAdapter(spec, options, sink, log);
}

/**
 * A parent that is frozen (SIGSTOP, a hung event loop) keeps stdin open, so 'end' never comes, and
 * its registry entries lapse while the agent runs on unsupervised. Its heartbeat bytes (written with
 * every registry refresh) are the proof of life: after `boundMs` without one, `onSilent` fires once.
 */
function watchOwnerHeartbeat(boundMs: number, onSilent: (silentMs: number) => void): void {
  let last = performance.now();
  process.stdin.on('data', () => (last = performance.now()));
  const check = setInterval(
    () => {
      const silent = performance.now() - last;
      if (silent <= boundMs) return;
      clearInterval(check);
      onSilent(Math.round(silent));
    },
    Math.max(50, Math.min(1_000, Math.floor(boundMs / 4))),
  );
  check.unref();
}

main().catch((err: unknown) => {
  const log: Logger = createLogger({ service: 'agentctl' });
  log.error({ err: errorMessage(err) }, 'agentctl failed');
  process.exit(1);
});
