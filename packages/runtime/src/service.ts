import { pingEndpoint, QueueGroups, type ServiceName } from '@kandev/contracts';
import type { Service } from '@nats-io/services';
import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { z } from 'zod';
import { connectDb, migrate, type DbDebug, type Sql } from './db.js';
import { BaseEnv, parseEnv } from './env.js';
import { EventPublisher, ensureEventStream } from './events.js';
import { startHealthServer } from './health.js';
import { startHousekeeping } from './housekeeping.js';
import { createLogger, type Logger } from './log.js';
import { connectNats, type NatsConnection } from './nats.js';
import { Outbox } from './outbox.js';
import { isProduction, resolveKeys, withholdKeys, type KeyKind } from './keys.js';
import { bindBusIdentity, busIdentityFromEnv, withholdBusKey } from './identity.js';
import { natsAuthOf } from './nats.js';
import { on, type Registration } from './rpc.js';
import { InFlightRequests, serveEndpoints } from './rpc-serve.js';
import { initTracing, shutdownTracing } from './tracing.js';
import { startStallRecorder } from './stalls.js';

export interface ServiceDefinition<S extends z.ZodObject = typeof BaseEnv> {
  name: ServiceName;
  /** The service's package version (`packageVersion(import.meta.url)`): service.version of its spans and of its $SRV endpoints. */
  version?: string | undefined;
  /** The service's env schema (BaseEnv extended); parsed once, fails fast. */
  env?: S;
  /** PostgreSQL schema this service owns; omit for services without data. */
  schema?: string;
  migrationsDir?: string;
  /**
   * Whether it publishes events and so ensures the event stream at start-up (default true). The
   * gateway and mcp only read live events on a core subscription: they need, and under
   * deploy/nats/permissions.conf have, no JetStream API rights.
   */
  publishesEvents?: boolean;
  /**
   * The token keys it holds (keys.ts, ADR 0020): checked at start-up, before anything connects; a
   * missing, placeholder or short key refuses the start. Keys not named here are never read.
   */
  keys?: readonly KeyKind[];
  /** Wire up endpoints, consumers and timers. Runs after connections are up. May return URLs it serves. */
  start(rt: ServiceRuntime<z.infer<S>>): Promise<void | { urls?: Record<string, string> }>;
}

export interface ServiceRuntime<E = BaseEnv> {
  readonly name: ServiceName;
  readonly instanceId: string;
  readonly env: E & BaseEnv;
  readonly log: Logger;
  readonly nc: NatsConnection;
  /** Present when the definition names a schema. */
  readonly sql: Sql;
  readonly publisher: EventPublisher;
  readonly outbox: Outbox;
  /**
   * Register endpoints in the service's queue group (call once or more). `callers`: only these
   * services may call them, verified on the bus (identity.ts; enforced when bus identity is on).
   */
  serve(registrations: Registration[], opts?: { callers?: readonly ServiceName[] }): Promise<Service>;
  /** Run at shutdown, in reverse order of registration, before NATS drains. */
  onStop(fn: () => Promise<void> | void): void;
  /** Extra readiness condition for /readyz. */
  addReadinessCheck(fn: () => Promise<boolean>): void;
  /** A token key the definition names in `keys` (throws for any other: a service holds only its own). */
  key(kind: KeyKind): string;
  /** A fact /readyz reports under `details` (and the service's ping answers with, for the gateway's /readyz). */
  addReadinessDetail(name: string, value: () => string | number | boolean): void;
}

export interface RunningService {
  readonly runtime: ServiceRuntime<unknown>;
  readonly healthUrl: string;
  readonly urls: Record<string, string>;
  stop(): Promise<void>;
}

/**
 * The composition root every service shares: env → tracing → logger → NATS (+ stream) →
 * PostgreSQL (+ migrations) → the service's own wiring → health server. `stop()` runs once:
 * readiness off, endpoint subscriptions drained, in-flight requests awaited, the service's own
 * stoppers, NATS drained, servers closed; bounded by SHUTDOWN_TIMEOUT_MS.
 */
export async function startService<S extends z.ZodObject>(
  def: ServiceDefinition<S>,
  source: NodeJS.ProcessEnv = process.env,
  /** For tests: `dbDebug` sees every statement the service's pool sends, in the order it sends them. */
  opts: { dbDebug?: DbDebug } = {},
): Promise<RunningService> {
  const env = parseEnv((def.env ?? BaseEnv) as z.ZodType, source) as z.infer<S> & BaseEnv;
  const keys = resolveKeys(source, def.keys ?? []);
  // Verified identity on the bus (ADR 0055): required with NODE_ENV=production, else on when configured.
  const busIdentity = busIdentityFromEnv(def.name, source, isProduction(source));
  const instanceId = env.INSTANCE_ID ?? `${def.name}-${randomBytes(4).toString('hex')}`;
  await initTracing({
    serviceName: `kandev-${def.name}`,
    serviceVersion: def.version,
    instanceId,
    env: {
      OTEL_SERVICE_NAME: env.OTEL_SERVICE_NAME,
      OTEL_RESOURCE_ATTRIBUTES: env.OTEL_RESOURCE_ATTRIBUTES,
      OTEL_SDK_DISABLED: env.OTEL_SDK_DISABLED,
      OTEL_TRACES_EXPORTER: env.OTEL_TRACES_EXPORTER,
      OTEL_EXPORTER_OTLP_ENDPOINT: env.OTEL_EXPORTER_OTLP_ENDPOINT,
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    },
  });
  const log = createLogger(def.name, env.LOG_LEVEL, instanceId);
  startStallRecorder(def.name);
  const nc = await connectNats({
    url: env.NATS_URL,
    name: `${def.name}:${instanceId}`,
    user: env.NATS_USER,
    pass: env.NATS_PASS,
    requestTimeoutMs: env.REQUEST_TIMEOUT_MS,
  });
  // The bus admits only the services (ADR 0054): in production a server that lets anyone in is refused.
  const natsAuth = natsAuthOf(nc, env.NATS_USER);
  if (natsAuth === 'none' && isProduction(source)) {
    await nc.close().catch(() => undefined);
    throw new Error(
      `NATS at ${env.NATS_URL} admits clients without credentials (or NATS_USER is unset): refused with NODE_ENV=production; run it with a user per service (deploy/nats/permissions.conf)`,
    );
  }
  if (busIdentity) bindBusIdentity(nc, busIdentity);
  if (def.publishesEvents !== false) await ensureEventStream(nc, { replicas: env.KANDEV_JS_REPLICAS, log });
  let sql: Sql | undefined;
  if (def.schema) {
    if (!env.DATABASE_URL) throw new Error(`${def.name} needs DATABASE_URL`);
    sql = connectDb(env.DATABASE_URL, def.schema, { instanceId, ...(opts.dbDebug ? { debug: opts.dbDebug } : {}) });
    await migrate(sql, def.schema, def.migrationsDir ?? null, log);
  }
  const publisher = new EventPublisher(nc);
  const outbox = new Outbox(sql as Sql, publisher, log);
  const services: Service[] = [];
  const stoppers: Array<() => Promise<void> | void> = [];
  const checks: Array<() => Promise<boolean>> = [];
  const details = new Map<string, () => string | number | boolean>();
  const readDetails = (): Record<string, string | number | boolean> => Object.fromEntries([...details].map(([k, fn]) => [k, fn()]));
  details.set('nats_auth', () => natsAuth);
  details.set('bus_identity', () => (busIdentity ? 'verified' : 'off'));
  const inFlight = new InFlightRequests();
  let ready = false;
  let stopping: Promise<void> | undefined;

  const runtime: ServiceRuntime<z.infer<S>> = {
    name: def.name,
    instanceId,
    env,
    log,
    nc,
    get sql(): Sql {
      if (!sql) throw new Error(`${def.name} has no database`);
      return sql;
    },
    publisher,
    outbox,
    async serve(registrations, serveOpts = {}) {
      const svc = await serveEndpoints(
        nc,
        {
          service: def.name,
          ...(def.version ? { version: def.version } : {}),
          instanceId,
          queue: QueueGroups[def.name],
          log,
          inFlight,
          ...(serveOpts.callers ? { callers: serveOpts.callers } : {}),
        },
        registrations,
      );
      services.push(svc);
      return svc;
    },
    onStop: (fn) => void stoppers.push(fn),
    addReadinessCheck: (fn) => void checks.push(fn),
    key(kind) {
      const k = keys[kind];
      if (!k) throw new Error(`${def.name} does not hold the ${kind} key (ServiceDefinition.keys)`);
      return k;
    },
    addReadinessDetail: (name, fn) => void details.set(name, fn),
  };

  await runtime.serve([
    on(pingEndpoint(def.name), async () => ({ service: def.name, instance_id: instanceId, ...(details.size > 0 ? { details: readDetails() } : {}) })),
  ]);
  const started = (await def.start(runtime)) || {};
  if (sql) {
    outbox.startRelay();
    outbox.exportAge();
  }
  const stopHousekeeping = sql && def.publishesEvents !== false ? startHousekeeping(sql, nc, log) : () => undefined;

  const health = await startHealthServer({
    host: env.HEALTH_HOST,
    port: env.HEALTH_PORT,
    ready: async () => ready && !nc.isClosed() && (await Promise.all(checks.map((c) => c().catch(() => false)))).every(Boolean),
    details: readDetails,
  });
  ready = true;
  const urls = { health: health.url, ...(started.urls ?? {}) };
  log.info({ urls }, `${def.name} started`);

  const stop = () =>
    (stopping ??= (async () => {
      ready = false;
      const timer = setTimeout(() => {
        log.error('shutdown timed out; exiting');
        process.exit(1);
      }, env.SHUTDOWN_TIMEOUT_MS);
      timer.unref();
      try {
        for (const s of services) await s.stop().catch((e: unknown) => log.warn({ err: e }, 'endpoint subscription stop failed'));
        await inFlight.settled();
        for (const fn of stoppers.reverse()) await Promise.resolve(fn()).catch((e) => log.warn({ err: e }, 'stopper failed'));
        outbox.stopRelay();
        stopHousekeeping();
        await nc.drain().catch((e: unknown) => log.warn({ err: e }, 'NATS drain failed; closing')); // exiting either way
        await sql?.end({ timeout: 2 });
        await new Promise<void>((r) => closeServer(health.server, r));
        await shutdownTracing();
        log.info(`${def.name} stopped`);
      } finally {
        clearTimeout(timer);
      }
    })());

  return { runtime: runtime as ServiceRuntime<unknown>, healthUrl: health.url, urls, stop };
}

function closeServer(server: Server, done: () => void) {
  server.close(() => done());
  server.closeAllConnections?.();
}

/**
 * For src/main.ts: start, and stop once on SIGTERM/SIGINT. The handlers are in place before the
 * service announces "started" (inside startService): a supervisor may signal as soon as it reads
 * that line, and without a handler the signal would kill the process with no drain and without
 * its exit handlers (a CPU profile is written by one). A signal while it is still starting ends
 * it at once, as before: there is nothing to drain yet, and a start that waits (for NATS, for
 * PostgreSQL) must not make it deaf to Ctrl-C.
 */
export async function runService<S extends z.ZodObject>(def: ServiceDefinition<S>): Promise<RunningService> {
  let running: RunningService | undefined;
  const onSignal = (signal: 'SIGTERM' | 'SIGINT') => {
    if (!running) {
      console.error(JSON.stringify({ level: 'info', service: def.name, msg: 'signal while starting; exiting', signal }));
      process.exit(signal === 'SIGINT' ? 130 : 143);
    }
    running.runtime.log.info({ signal }, 'shutting down');
    void running.stop().then(() => process.exit(0));
  };
  process.once('SIGTERM', () => onSignal('SIGTERM'));
  process.once('SIGINT', () => onSignal('SIGINT'));
  // The environment is read once, from a copy; the token keys then leave process.env, so no child
  // process (lifecycle's agentctl and agents inherit its environment) can inherit them, whatever
  // its own denylist names. The service holds its key in memory only (rt.key).
  const source = { ...process.env };
  withholdKeys(process.env);
  withholdBusKey(process.env);
  try {
    running = await startService(def, source);
  } catch (e) {
    console.error(JSON.stringify({ level: 'fatal', service: def.name, msg: 'start failed', err: String((e as Error)?.stack ?? e) }));
    process.exit(1);
  }
  // Supervisors (npm start, the test stack) wait for this line; announce it whatever LOG_LEVEL hides.
  if (!running.runtime.log.isLevelEnabled('info')) {
    process.stdout.write(
      `${JSON.stringify({ level: 'info', service: def.name, instance_id: running.runtime.instanceId, msg: `${def.name} started`, urls: running.urls })}\n`,
    );
  }
  return running;
}
