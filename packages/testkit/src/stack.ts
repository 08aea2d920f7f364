import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signAgentToken, signOperatorToken } from '@kandev/runtime';
import type { ServiceProcess } from '@kandev/runtime/dev/launch';
import type { McpMode } from '@kandev/contracts';
import { readAgentEvents, type AgentEvent } from './agents/events.js';
import { ApiClient } from './clients.js';
import { natsLogin, startNats, type TestNats } from './nats.js';
import { createTestDatabase, type TestDatabase } from './pg.js';
import { repoRoot } from './paths.js';
import { STACK_SERVICES, createServiceLauncher, inheritableEnv, type StackService } from './launcher.js';
import { startNatsCluster } from './nats-cluster.js';
import { workerAgentUidRange } from './agent-uids.js';

/**
 * deploy/nats/permissions.conf on one local server with fixed passwords (`<user>-test-pass`), for
 * service-level tests; the whole stack's server has random ones (`Stack.nats.credentials`).
 */
export const NATS_TEST_PERMISSIONS = join(repoRoot, 'deploy/nats/test-permissions.conf');

export { STACK_SERVICES, type StackService } from './launcher.js';

export interface Stack {
  gatewayUrl: string;
  wsUrl: string;
  mcpUrl: string;
  nats: TestNats;
  db: TestDatabase;
  stateDir: string;
  /** The operator key (the name of the one-key era; same as operatorKey). */
  secret: string;
  /** Signs operator tokens; only the gateway holds it (ADR 0020). */
  operatorKey: string;
  /** Signs agent tokens; mcp, orchestrator and lifecycle hold it. */
  agentKey: string;
  /**
   * What a process needs to join the bus as `name` (ADR 0054, 0055): its NATS user and password and
   * its bus identity keys (KANDEV_BUS_KEY, KANDEV_BUS_PUBLIC_KEYS), as the stack's own process of it has.
   */
  busEnv(name: StackService): NodeJS.ProcessEnv;
  services: Map<StackService, ServiceProcess>;
  operatorToken(workspaces?: string[]): Promise<string>;
  agentToken(taskId: string, mode?: McpMode, sessionId?: string): Promise<string>;
  /** The last lines a service wrote (stdout and stderr, its current and earlier processes): why it died, when it did. */
  logTail(name: StackService): string[];
  /** Restart one service process (same env; the gateway and mcp on the same ports). */
  restart(name: StackService): Promise<ServiceProcess>;
  /**
   * Start one more process of a service beside the first, as a replica would run: its own
   * INSTANCE_ID (`<name>-2`, `-3`, ...) and ports, the same NATS and database. The stack stops it too.
   * `env` overrides settings of this process only (a bench compares a setting on and off side by side).
   */
  addReplica(name: StackService, env?: NodeJS.ProcessEnv): Promise<ServiceProcess>;
  /** The replicas of a service started beside its first process (by `replicas` or `addReplica`). */
  replicas(name: StackService): ServiceProcess[];
  /** Stop (if still running) and start again one replica, with its instance id, env and ports. */
  restartReplica(p: ServiceProcess): Promise<ServiceProcess>;
  /** The process running as INSTANCE_ID `id` (`<name>-1` is the first, `services.get(name)`), if any. */
  instance(id: string): ServiceProcess | undefined;
  /** Stop (if still running) and start again the process of INSTANCE_ID `id`, as its first start did. */
  restartInstance(id: string): Promise<ServiceProcess>;
  stop(): Promise<void>;
}

/**
 * The whole system as processes, the way `npm start` runs it, on a nats-server and database of
 * this test's own. Tests then drive it only through the public surfaces (HTTP, /ws, MCP).
 */
export interface StackOptions {
  env?: NodeJS.ProcessEnv;
  logLevel?: string;
  /** Every log line of every service (JSON), e.g. to watch lifecycle's relay of agent events. */
  onLog?: (service: StackService, line: string) => void;
  /**
   * Kept for callers of the time the permissions were optional: every stack now runs NATS with a
   * user per service under deploy/nats/permissions.conf and no anonymous client (ADR 0054).
   */
  natsPermissions?: boolean;
  /**
   * Scale-out topology: a nats-server cluster of this many nodes (routes on loopback; the event
   * stream and the registry bucket with as many replicas, at most 3) instead of one server.
   */
  natsCluster?: number;
  /** Processes of every service (1 = one each; 2 = a replica beside each, as `addReplica` starts). */
  replicas?: number;
  /**
   * Where the services' bundles are: the repository (the default), or a directory laid out as the
   * image's /app by scripts/image-layout.mjs, whose services run without the repository's node_modules.
   */
  serviceRoot?: string;
}

export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  // Authenticated, as npm start and deploy/ run it: a user per service, random passwords (ADR 0054).
  const [nats, db] = await Promise.all([opts.natsCluster ? startNatsCluster(opts.natsCluster) : startNats({ auth: true }), createTestDatabase()]);
  const stateDir = mkdtempSync(join(tmpdir(), 'kandev-stack-'));
  // Two keys, each process holding only its own, as npm start and deploy/ run it (ADR 0020).
  const operatorKey = opts.env?.KANDEV_OPERATOR_JWT_SECRET ?? opts.env?.KANDEV_JWT_SECRET ?? 'stack-test-operator-key-0123456789abcdef';
  const agentKey = opts.env?.KANDEV_AGENT_JWT_SECRET ?? opts.env?.KANDEV_JWT_SECRET ?? 'stack-test-agent-key-0123456789abcdef';
  const services = new Map<StackService, ServiceProcess>();
  const tails = new Map<StackService, string[]>();
  const launcher = createServiceLauncher({
    baseEnv: {
      ...inheritableEnv(process.env, { dropNatsLogin: true }),
      NATS_URL: nats.url,
      DATABASE_URL: db.url,
      KANDEV_STATE_DIR: stateDir,
      GATEWAY_PORT: '0',
      MCP_PORT: '0',
      LOG_LEVEL: opts.logLevel ?? process.env.STACK_LOG_LEVEL ?? 'warn',
      // Agents get a minimal environment (R-9.1); the scripted agents' observation log is passed on by name.
      AGENT_ENV_PASSTHROUGH: 'SCRIPTED_AGENT_EVENTS',
      // Stacks of test files running side by side must not hand out the same agent uid.
      ...(workerAgentUidRange() ? { AGENT_UID_RANGE: workerAgentUidRange() } : {}),
      ...(opts.natsCluster ? { KANDEV_JS_REPLICAS: String(Math.min(3, opts.natsCluster)) } : {}),
      // request rates are off in test stacks unless a test sets them (the rate tests and
      // e2e/test/coordination.test.ts do): the e2e files' polling and bursts from one token are not what
      // they test, and on a quiet machine they exceed the defaults (ADR 0078, "Not chosen").
      KANDEV_AGENT_RATE: '0',
      KANDEV_OPERATOR_RATE: '0',
      ...opts.env,
    },
    keys: { operator: operatorKey, agent: agentKey },
    natsLogin: (name) => natsLogin(nats, name),
    ...(opts.serviceRoot ? { serviceRoot: opts.serviceRoot } : {}),
    onLog: (_id, name, l) => {
      const tail = tails.get(name) ?? [];
      tail.push(l);
      if (tail.length > 60) tail.shift();
      tails.set(name, tail);
      opts.onLog?.(name, l);
      if (process.env.STACK_LOGS) process.stderr.write(`[${name}] ${l}\n`);
    },
    onStarted: (p, id) => {
      if (id === `${p.name}-1`) services.set(p.name as StackService, p);
    },
  });
  try {
    // Every start settles before a failure is thrown, so the cleanup below finds every process that did start.
    await launcher.startAll();
    for (let r = 1; r < (opts.replicas ?? 1); r++) for (const name of STACK_SERVICES) await launcher.addReplica(name);
  } catch (e) {
    await launcher.stop();
    await Promise.all([nats.stop(), db.drop()]);
    rmSync(stateDir, { recursive: true, force: true });
    throw e;
  }
  const restartReplica = async (p: ServiceProcess) => {
    const id = launcher.instanceIdOf(p);
    if (!id || id === `${p.name}-1`) throw new Error('restartReplica: not a replica of this stack');
    return launcher.restartInstance(id);
  };
  const gatewayUrl = services.get('gateway')!.urls.http!;
  return {
    gatewayUrl,
    wsUrl: gatewayUrl.replace(/^http/, 'ws') + '/ws',
    mcpUrl: services.get('mcp')!.urls.mcp!,
    nats,
    db,
    stateDir,
    secret: operatorKey,
    operatorKey,
    agentKey,
    busEnv: launcher.busEnv,
    services,
    ...stackTokens(operatorKey, agentKey),
    logTail: (name) => [...(tails.get(name) ?? [])],
    restart: (name) => launcher.restartInstance(`${name}-1`),
    addReplica: (name, env) => launcher.addReplica(name, env),
    replicas: (name) => launcher.replicas(name),
    restartReplica,
    instance: (id) => launcher.instance(id),
    restartInstance: (id) => launcher.restartInstance(id),
    async stop() {
      await launcher.stop();
      await Promise.all([nats.stop(), db.drop()]);
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/** The token signers of a stack with these keys (also for a client of a stack another process started). */
export function stackTokens(operatorKey: string, agentKey: string): Pick<Stack, 'operatorToken' | 'agentToken'> {
  return {
    operatorToken: (workspaces = ['*']) => signOperatorToken(operatorKey, { sub: 'test-operator', workspaces }),
    agentToken: (taskId, mode = 'task', sessionId) => signAgentToken(agentKey, { task_id: taskId, mode, ...(sessionId ? { session_id: sessionId } : {}) }),
  };
}

/** One agent process's entries of the scripted agents' observation log. */
export const agentEventsOf =
  (eventsFile: string) =>
  (pid: number): AgentEvent[] =>
    readAgentEvents(eventsFile).filter((e) => e.pid === pid);

export interface AgentStack {
  stack: Stack;
  /** Operator API client for all workspaces. */
  api: ApiClient;
  token: string;
  /** The scripted agents' observation log (SCRIPTED_AGENT_EVENTS) shared by every agent of the stack. */
  eventsFile: string;
  agentEvents(pid: number): AgentEvent[];
  stop(): Promise<void>;
}

/** The whole stack with the scripted agents' observation log and an operator API client (e2e tests, benches). */
export async function startAgentStack(env: NodeJS.ProcessEnv = {}, opts: Omit<StackOptions, 'env'> = {}): Promise<AgentStack> {
  const eventsDir = mkdtempSync(join(tmpdir(), 'kandev-agent-events-'));
  const eventsFile = join(eventsDir, 'events.jsonl');
  // Agents run under uids of their own: they pass through the directory (never list it)
  // and append to this one file.
  chmodSync(eventsDir, 0o711);
  writeFileSync(eventsFile, '');
  chmodSync(eventsFile, 0o666);
  const stack = await startStack({ ...opts, env: { SCRIPTED_AGENT_EVENTS: eventsFile, ...env } });
  const token = await stack.operatorToken();
  return {
    stack,
    api: new ApiClient(stack.gatewayUrl, token),
    token,
    eventsFile,
    agentEvents: agentEventsOf(eventsFile),
    stop: () => stack.stop(),
  };
}
