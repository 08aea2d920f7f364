// The one launcher of the services: what every process of the control plane gets (its keys, its bus
// identity, its NATS login, its instance id and ports) and how the processes are started, restarted,
// scaled and stopped. `npm start` (scripts/lib/stack.mjs, with its own NATS, PostgreSQL and
// supervision around it), the test kit's `startStack` and the benchmarks (through `startStack`) all
// launch through it, so a stack in a test is started the way an operator's is.
import { BUS_KEY_ENV, BUS_PUBLIC_KEYS_ENV, KEY_ENV, SERVICE_KEYS, generateBusKeys, type KeyKind } from '@kandev/runtime';
import { spawnServiceProcess, type ServiceProcess } from '@kandev/runtime/dev/launch';
import { serviceEntry } from './paths.js';

/** Start order: owners of data and of the subjects others call first, the edges last. */
export const STACK_SERVICES = ['orchestrator', 'holds', 'lifecycle', 'mcp', 'gateway'] as const;
export type StackService = (typeof STACK_SERVICES)[number];

export const isStackService = (name: string): name is StackService => (STACK_SERVICES as readonly string[]).includes(name);

/** Variables no process inherits from the launcher's shell: each gets only the keys and login it holds. */
const NEVER_INHERITED = ['KANDEV_JWT_SECRET', ...Object.values(KEY_ENV), BUS_KEY_ENV, BUS_PUBLIC_KEYS_ENV, 'OTEL_SERVICE_NAME'];

export interface LauncherOptions {
  /** Every service's environment before its own part: NATS_URL, DATABASE_URL, KANDEV_STATE_DIR, LOG_LEVEL, ports… */
  baseEnv: NodeJS.ProcessEnv;
  /** The two token keys (ADR 0020); each service gets only those it holds. */
  keys: Record<KeyKind, string>;
  /** The NATS user and password a service logs in with (ADR 0054), or none on a server with its own users. */
  natsLogin(name: StackService): { user?: string; pass?: string };
  /** Where the bundles are: the repository (default) or an image layout (scripts/image-layout.mjs). */
  serviceRoot?: string;
  /** The GATEWAY_PORT / MCP_PORT of a replica of those two: '0' (any free port) unless said. */
  replicaPort?: () => Promise<string>;
  startTimeoutMs?: number;
  onLog?: (instanceId: string, name: StackService, line: string) => void;
  /** Every process once it has started (first start, replica or restart), e.g. to supervise it. */
  onStarted?: (p: ServiceProcess, instanceId: string) => void;
  /**
   * Lifecycle started after mcp gets mcp's URL as MCP_PUBLIC_URL (the default); `false` leaves it to
   * lifecycle (http://127.0.0.1:$MCP_PORT/mcp), for a launcher that fixes MCP_PORT up front.
   */
  handMcpUrlToLifecycle?: boolean;
}

export interface ServiceLauncher {
  /** A bus identity key pair per service, new for each launcher (ADR 0055). */
  busKeys: { privateKeys: Record<string, string>; publicKeys: string };
  /** What a process needs to join the bus as `name`: its NATS login and bus keys. */
  busEnv(name: StackService): NodeJS.ProcessEnv;
  /** The full environment of `name`'s process `instanceId` (default `<name>-1`). */
  envFor(name: StackService, instanceId?: string): NodeJS.ProcessEnv;
  /** Start `<name>-1`. */
  start(name: StackService): Promise<ServiceProcess>;
  /** Every service at once, lifecycle once mcp listens (it hands agents mcp's URL); settles all before throwing. */
  startAll(names?: readonly StackService[]): Promise<void>;
  /** One more process of `name` (`<name>-2`, `-3`, …) with ports of its own. */
  /** `env` overrides settings of this process only (a bench compares a setting on and off side by side). */
  addReplica(name: StackService, env?: NodeJS.ProcessEnv): Promise<ServiceProcess>;
  /** Stop (if still running) and start again the process of `instanceId` with the env of its first start. */
  restartInstance(instanceId: string): Promise<ServiceProcess>;
  /** The process running as `instanceId`. */
  instance(instanceId: string): ServiceProcess | undefined;
  /** The instance id of a process this launcher started. */
  instanceIdOf(p: ServiceProcess): string | undefined;
  /** `<name>-1` of each service started. */
  first(name: StackService): ServiceProcess | undefined;
  replicas(name: StackService): ServiceProcess[];
  /** Every process, in start order. */
  all(): ServiceProcess[];
  /** Forget a process that exited (a supervisor restarts it with `restartInstance`). */
  forget(p: ServiceProcess): void;
  /** Services in reverse start order, each one's processes together; `stopOne` instead of `p.stop(graceMs)` if given. */
  stop(opts?: { graceMs?: number; stopOne?: (p: ServiceProcess, instanceId: string) => Promise<void> }): Promise<void>;
}

/** The shell's environment without any key, bus identity or tracing name another process holds. */
export function inheritableEnv(env: NodeJS.ProcessEnv, opts: { dropNatsLogin: boolean }): NodeJS.ProcessEnv {
  const out = { ...env };
  for (const v of NEVER_INHERITED) delete out[v];
  if (opts.dropNatsLogin) for (const v of ['NATS_USER', 'NATS_PASS']) delete out[v];
  return out;
}

export function createServiceLauncher(opts: LauncherOptions): ServiceLauncher {
  const busKeys = generateBusKeys(STACK_SERVICES);
  const envOf = new Map<string, NodeJS.ProcessEnv>();
  const byInstance = new Map<string, ServiceProcess>();
  const base = { ...opts.baseEnv };
  for (const v of NEVER_INHERITED) delete base[v];

  const busEnv = (name: StackService): NodeJS.ProcessEnv => {
    const login = opts.natsLogin(name);
    return {
      ...(login.user !== undefined ? { NATS_USER: login.user, NATS_PASS: login.pass } : {}),
      [BUS_KEY_ENV]: busKeys.privateKeys[name],
      [BUS_PUBLIC_KEYS_ENV]: busKeys.publicKeys,
    };
  };
  const keysFor = (name: StackService): NodeJS.ProcessEnv => {
    const out: NodeJS.ProcessEnv = {};
    for (const kind of SERVICE_KEYS[name] as readonly KeyKind[]) out[KEY_ENV[kind]] = opts.keys[kind];
    return out;
  };
  const first = (name: StackService) => byInstance.get(`${name}-1`);
  // The port a gateway or mcp process listens on, so that its restart listens there again: clients
  // (and the agents' MCP URL) keep working.
  const listeningPort = (p: ServiceProcess): NodeJS.ProcessEnv => {
    const url = p.name === 'gateway' ? p.urls.http : p.name === 'mcp' ? p.urls.mcp : undefined;
    return url ? { [p.name === 'gateway' ? 'GATEWAY_PORT' : 'MCP_PORT']: new URL(url).port } : {};
  };
  const envFor = (name: StackService, instanceId = `${name}-1`): NodeJS.ProcessEnv => {
    const mcpUrl = first('mcp')?.urls.mcp;
    return {
      ...base,
      ...keysFor(name),
      ...busEnv(name),
      ...(name === 'lifecycle' && mcpUrl && opts.handMcpUrlToLifecycle !== false ? { MCP_PUBLIC_URL: mcpUrl } : {}),
      INSTANCE_ID: instanceId,
    };
  };
  const launch = async (name: StackService, env: NodeJS.ProcessEnv): Promise<ServiceProcess> => {
    const id = env.INSTANCE_ID!;
    const p = await spawnServiceProcess({
      name,
      entry: serviceEntry(name, opts.serviceRoot),
      env,
      onLog: (line) => opts.onLog?.(id, name, line),
      ...(opts.startTimeoutMs ? { startTimeoutMs: opts.startTimeoutMs } : {}),
    });
    envOf.set(id, { ...env, ...listeningPort(p) });
    byInstance.set(id, p);
    opts.onStarted?.(p, id);
    return p;
  };
  const instanceIdOf = (p: ServiceProcess) => [...byInstance].find(([, q]) => q === p)?.[0];
  const replicas = (name: StackService) => [...byInstance].filter(([id, p]) => p.name === name && id !== `${name}-1`).map(([, p]) => p);
  const start = (name: StackService) => launch(name, envFor(name));

  return {
    busKeys,
    busEnv,
    envFor,
    start,
    async startAll(names = STACK_SERVICES) {
      const want = (n: StackService) => names.includes(n);
      const one = (n: StackService) => (want(n) ? start(n).then(() => undefined) : Promise.resolve());
      // All at once, as Kubernetes starts them, except lifecycle after mcp: 3.2-3.5 s a stack on a
      // 2-core machine against 4.2-4.7 s one after the other (docs/history/testing-measurements.md).
      const started = await Promise.allSettled([one('orchestrator'), one('holds'), one('mcp').then(() => one('lifecycle')), one('gateway')]);
      const failed = started.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
    async addReplica(name, env = {}) {
      const n =
        [...byInstance.keys(), ...envOf.keys()].filter((id) => id.startsWith(`${name}-`)).reduce((m, id) => Math.max(m, Number(id.slice(name.length + 1))), 1) +
        1;
      const port = (await opts.replicaPort?.()) ?? '0';
      const ports = name === 'gateway' ? { GATEWAY_PORT: port } : name === 'mcp' ? { MCP_PORT: port } : {};
      return launch(name, { ...envFor(name, `${name}-${n}`), ...env, ...ports });
    },
    async restartInstance(instanceId) {
      const env = envOf.get(instanceId);
      const name = env?.INSTANCE_ID?.slice(0, env.INSTANCE_ID.lastIndexOf('-'));
      if (!env || !name || !isStackService(name)) throw new Error(`restartInstance: no process was started as ${instanceId}`);
      await byInstance.get(instanceId)?.stop();
      byInstance.delete(instanceId);
      return launch(name, env);
    },
    instance: (id) => byInstance.get(id),
    instanceIdOf,
    first,
    replicas,
    all: () => [...byInstance.values()],
    forget(p) {
      const id = instanceIdOf(p);
      if (id) byInstance.delete(id);
    },
    async stop(stopOpts = {}) {
      for (const name of [...STACK_SERVICES].reverse()) {
        const procs = [...byInstance].filter(([, p]) => p.name === name);
        await Promise.all(procs.map(([id, p]) => (stopOpts.stopOne ? stopOpts.stopOne(p, id) : p.stop(stopOpts.graceMs))));
        for (const [id] of procs) byInstance.delete(id);
      }
    },
  };
}
