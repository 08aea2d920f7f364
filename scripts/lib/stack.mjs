// The local stack behind `npm start` (started by scripts/start.mjs; runnable on its own too):
// NATS and PostgreSQL unless configured, then every service as its own process, then the URLs and
// an operator token. SIGINT/SIGTERM stop the services in reverse order, then what this process
// started, and exit 0 with no process of ours left behind. See docs/operations.md. The services are
// launched by the test kit's typed launcher (packages/testkit/src/launcher.ts), as every test stack
// and benchmark launches them; what is npm start's own is here: supervision, the order of the
// start and the stop, and the printed URLs, with NATS and PostgreSQL of its own in infra.mjs and
// the state dir's files (keys, lock, bus keys, operator token) in state.mjs.
import { chmodSync, createWriteStream, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startDatabase, startNats } from './infra.mjs';
import { maskUrl, portFree, stablePort } from './net.mjs';
import { descendants, isAlive, readStat, reap } from './proc.mjs';
import { StartError, acquireStartLock, ensureKeys, stateDir, writeBusKeys, writeOperatorToken } from './state.mjs';
import { decideRestart, restartPolicy } from './supervise.mjs';

/**
 * @typedef {import('@kandev/runtime/dev/launch').ServiceProcess} ServiceProcess
 * @typedef {import('@kandev/testkit/launcher').StackService} StackService
 * @typedef {import('@kandev/testkit/launcher').ServiceLauncher} ServiceLauncher
 * @typedef {Awaited<ReturnType<typeof importRuntime>>} Runtime
 * @typedef {import('./infra.mjs').Infra} Infra
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const env = process.env;
/** @param {string | undefined} v @param {number} d */
const num = (v, d) => (v !== undefined && v !== '' && Number.isFinite(Number(v)) ? Number(v) : d);
/** How long a service gets between SIGTERM and SIGKILL: its own bounded shutdown plus slack. */
const STOP_GRACE_MS = num(env.KANDEV_STOP_GRACE_MS, num(env.SHUTDOWN_TIMEOUT_MS, 10_000) + 5_000);
const START_TIMEOUT_MS = num(env.KANDEV_START_TIMEOUT_MS, 30_000);
const READY_TIMEOUT_MS = 20_000;

const t0 = performance.now();
const secs = (from = t0) => `${((performance.now() - from) / 1000).toFixed(1)}s`;
const say = (/** @type {string} */ msg) => process.stderr.write(`[kandev] ${msg}\n`);

const state = stateDir();
const logsDir = join(state, 'logs');
/** Releases the state dir's lock once taken (acquireStartLock). */
let releaseLock = () => {};
/** @type {{ nats: Infra | null, pg: Infra | null }} */
const running = { nats: null, pg: null };
/** The services' launcher (packages/testkit/src/launcher.ts), once created. */
/** @type {ServiceLauncher | null} */
let launcher = null;
/** @type {import('node:fs').WriteStream[]} */
const logStreams = [];
/** @type {Promise<void> | null} */
let stopping = null;
/** @type {Promise<unknown> | null} */
let inflight = null;
let firstSignalAt = 0;
const policy = restartPolicy(env);
/** Per service: times of its recent crashes (see supervise.mjs). */
/** @type {Map<string, number[]>} */
const crashes = new Map();
/** Restarts waiting out their backoff or starting; shutdown waits for them (each is bounded). */
/** @type {Set<Promise<void>>} */
const pendingRestarts = new Set();
const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));

/**
 * @param {readonly StackService[]} SERVICES
 * @returns {StackService[]}
 */
function serviceNames(SERVICES) {
  if (!env.KANDEV_SERVICES) return [...SERVICES];
  const wanted = env.KANDEV_SERVICES.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const unknown = wanted.filter((s) => !(/** @type {readonly string[]} */ (SERVICES).includes(s)));
  if (unknown.length) throw new StartError(`KANDEV_SERVICES names unknown service(s): ${unknown.join(', ')} (known: ${SERVICES.join(', ')})`);
  return SERVICES.filter((s) => wanted.includes(s));
}

async function importRuntime() {
  try {
    const [nats, natsAuth, jwt, keys, bundle, launcher] = await Promise.all([
      import('@kandev/runtime/dev/nats-server'),
      import('@kandev/runtime/dev/nats-auth'),
      import('@kandev/runtime/jwt'),
      import('@kandev/runtime/keys'),
      import('@kandev/runtime/bundle'),
      import('@kandev/testkit/launcher'),
    ]);
    return { ...nats, ...natsAuth, ...jwt, keys, ...bundle, ...launcher };
  } catch (e) {
    throw new StartError(
      `cannot load @kandev/runtime or @kandev/testkit (${/** @type {Error} */ (e).message}). Build first: \`npm run build\` (npm start does it for you).`,
    );
  }
}

/**
 * Run one start-up step; shutdown waits for the step in flight so nothing starts after it.
 * @template T
 * @param {() => Promise<T>} fn
 * @returns {Promise<T>}
 */
function step(fn) {
  if (stopping) throw new StartError('stopping');
  const p = fn();
  inflight = p;
  return p;
}

/** @param {string} file */
function logStream(file) {
  const s = createWriteStream(file, { flags: 'a' });
  logStreams.push(s);
  return s;
}

/**
 * nats-server or PostgreSQL that we started exiting outside a shutdown: started again on the same
 * port with the same data (the services reconnect by themselves), under the same restart policy as
 * the services; a crash loop, or a restart that cannot be done, stops everything.
 * @param {import('node:child_process').ChildProcess} child
 * @param {string} label
 * @param {() => Promise<void>} restart
 */
function watch(child, label, restart) {
  child.once('exit', (code, signal) => {
    if (!stopping) restartInfra(label, signal ?? `exit code ${code}`, restart);
  });
}

/**
 * @param {string} label
 * @param {string} how
 * @param {() => Promise<void>} restart
 */
function restartInfra(label, how, restart) {
  const d = decideRestart(crashes.get(label) ?? [], Date.now(), policy);
  crashes.set(label, d.crashes);
  if (d.giveUp) {
    say(`${label} exited (${how}): ${d.count} crashes within ${policy.windowMs / 1000}s is a crash loop; giving up and stopping everything (logs: ${logsDir})`);
    void shutdown(1, `${label} crash loop`);
    return;
  }
  say(
    `${label} exited unexpectedly (${how}); restarting in ${d.delayMs} ms (crash ${d.count} of ${policy.limit} allowed within ${policy.windowMs / 1000}s; logs: ${logsDir})`,
  );
  const attempt = (async () => {
    for (const until = Date.now() + d.delayMs; Date.now() < until && !stopping;) await sleep(Math.min(100, until - Date.now()));
    if (stopping) return;
    try {
      await restart();
    } catch (e) {
      // e.g. PostgreSQL's shared memory still held by a dying backend: a failed start counts as a crash.
      if (!stopping) restartInfra(label, `failed to start: ${/** @type {Error} */ (e).message.split('\n')[0]}`, restart);
    }
  })();
  pendingRestarts.add(attempt);
  void attempt.finally(() => pendingRestarts.delete(attempt));
}

/** What infra.mjs needs of this process: where to log, what is running, how to supervise. */
const infraContext = () => ({ state, logsDir, say, logStream, running, watch });

const procKey = (/** @type {import('./proc.mjs').Proc} */ p) => `${p.pid}:${p.start}`;
/**
 * A process and everything below it.
 * @param {number} pid
 */
function tree(pid) {
  const st = readStat(pid);
  return st ? [{ pid, start: st.start }, ...descendants(pid)] : descendants(pid);
}

/**
 * A service's log lines go to <service>.log (a replica's to <service>-<n>.log), and to stderr with KANDEV_LOG_STDOUT=1.
 * @param {string} instanceId
 * @param {StackService} name
 * @param {string} line
 */
function serviceLog(instanceId, name, line) {
  let out = serviceLogs.get(instanceId);
  if (!out) serviceLogs.set(instanceId, (out = logStream(logFileOf(instanceId))));
  out.write(line + '\n');
  if (env.KANDEV_LOG_STDOUT === '1') process.stderr.write(`${name.padEnd(12)} | ${line}\n`);
}
/** @type {Map<string, import('node:fs').WriteStream>} */
const serviceLogs = new Map();

/**
 * A service that exits while we are not stopping is restarted after a backoff (supervise.mjs),
 * each restart logged; a crash loop stops everything. A restart that fails to start counts as a
 * crash. A killed lifecycle takes its agents with it (they watch its pipe) and its next run
 * cleans up what its state file lists (R-6.4), so a restart never duplicates an agent.
 */
/**
 * @param {ServiceProcess} svc
 * @param {string} instanceId
 */
function supervise(svc, instanceId) {
  svc.process.once('exit', (code, signal) => {
    if (stopping) return;
    started().forget(svc);
    scheduleRestart(instanceId, signal ?? `exit code ${code}`);
  });
}

/** The launcher, once main has created it (supervision starts only after). */
function started() {
  if (!launcher) throw new Error('the launcher is not created yet');
  return launcher;
}

const logFileOf = (/** @type {string} */ instanceId) => join(logsDir, `${instanceId.replace(/-1$/, '')}.log`);

/**
 * @param {string} instanceId
 * @param {string} how
 */
function scheduleRestart(instanceId, how) {
  const d = decideRestart(crashes.get(instanceId) ?? [], Date.now(), policy);
  crashes.set(instanceId, d.crashes);
  const name = instanceId.replace(/-1$/, '');
  const windowS = policy.windowMs / 1000;
  if (d.giveUp) {
    say(`${name} exited (${how}): ${d.count} crashes within ${windowS}s is a crash loop; giving up and stopping everything (log: ${logFileOf(instanceId)})`);
    void shutdown(1, `${name} crash loop`);
    return;
  }
  say(
    `${name} exited unexpectedly (${how}); restarting in ${d.delayMs} ms (crash ${d.count} of ${policy.limit} allowed within ${windowS}s; log: ${logFileOf(instanceId)})`,
  );
  const attempt = (async () => {
    for (const until = Date.now() + d.delayMs; Date.now() < until && !stopping;) await sleep(Math.min(100, until - Date.now()));
    if (stopping) return;
    try {
      const svc = await startService(instanceId, () => started().restartInstance(instanceId));
      say(`${name} restarted (pid ${svc.pid})`);
    } catch (e) {
      if (stopping) return;
      say(/** @type {Error} */ (e).message);
      scheduleRestart(instanceId, 'failed to start');
    }
  })();
  pendingRestarts.add(attempt);
  void attempt.finally(() => pendingRestarts.delete(attempt));
}

/**
 * One process start through the launcher; a start that timed out leaves no process behind.
 * @param {string} instanceId
 * @param {() => Promise<ServiceProcess>} launch
 */
async function startService(instanceId, launch) {
  const before = new Set(descendants(process.pid).map(procKey));
  const t = performance.now();
  try {
    const svc = await launch();
    say(`${instanceId.replace(/-1$/, '')} started (pid ${svc.pid}, ${secs(t)})`);
    return svc;
  } catch (e) {
    // A service that timed out is still running: its process is the new direct child.
    const strays = descendants(process.pid).filter((p) => !before.has(procKey(p)) && readStat(p.pid)?.ppid === process.pid);
    await reap(strays.flatMap((p) => tree(p.pid)));
    throw new StartError(`${instanceId.replace(/-\d+$/, '')} failed to start (full log: ${logFileOf(instanceId)}):\n${/** @type {Error} */ (e).message}`);
  }
}

/** KANDEV_REPLICAS: processes of every service (default 1, at most 8 on one machine). */
function replicaCount() {
  const raw = env.KANDEV_REPLICAS ?? '1';
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 8) throw new StartError(`KANDEV_REPLICAS must be a whole number from 1 to 8, got ${JSON.stringify(raw)}`);
  return n;
}

/** @param {string} url */
async function waitReady(url) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline && !stopping) {
    try {
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2_000) });
      if (res.ok) return true;
    } catch {
      /* not yet */
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}

async function main() {
  const rt = await importRuntime();
  const names = serviceNames(rt.STACK_SERVICES);
  const replicas = replicaCount(); // refuses a bad value before anything starts
  // Each service runs from its bundle (ADR 0052); one older than its build would run earlier code.
  const stale = names.map((n) => rt.staleBundle(rt.serviceBundle(ROOT, n))).filter(Boolean);
  if (stale.length) {
    throw new StartError(`${stale.join('.\n')}.\nRun \`npm run build\` (npm start builds first; a service without src/main.ts is not written yet).`);
  }
  // The services' logs are the control plane's own: agents (under uids of their own when lifecycle
  // runs as root, docs/security.md) must not read them.
  mkdirSync(logsDir, { recursive: true, mode: 0o700 });
  chmodSync(logsDir, 0o700);
  releaseLock = acquireStartLock(state);

  // "Any free port" is resolved once, so a restarted gateway comes back at the printed URL; outside the
  // ephemeral range, so nothing else on the host is handed it before the service binds it.
  const gatewayPort = env.GATEWAY_PORT === '0' ? String(await stablePort()) : (env.GATEWAY_PORT ?? '8080');
  // Lifecycle starts before mcp and hands agents http://127.0.0.1:$MCP_PORT/mcp (unless
  // MCP_PUBLIC_URL is set), so "any free port" is resolved to a concrete one up front.
  const mcpPort = env.MCP_PORT === '0' ? String(await stablePort()) : (env.MCP_PORT ?? '8090');
  for (const [svc, port, v] of /** @type {Array<[StackService, string, string]>} */ ([
    ['gateway', gatewayPort, 'GATEWAY_PORT'],
    ['mcp', mcpPort, 'MCP_PORT'],
  ])) {
    if (names.includes(svc) && Number(port) > 0 && !(await portFree(Number(port), '0.0.0.0'))) {
      throw new StartError(`port ${port} (${v}) is already in use; set ${v}=<port> (0 = any free port)`);
    }
  }

  // Two keys (ADR 0020): each service gets only the one it holds (the launcher hands them out).
  const keys = ensureKeys();
  for (const kind of /** @type {const} */ (['operator', 'agent'])) {
    const k = keys[kind];
    if (k.created) say(`generated the ${kind} token key in ${k.source}`);
    const problem = rt.keys.keyProblem(k.secret, rt.keys.isProduction(env));
    if (problem) throw new StartError(`the ${kind} token key (${k.source}) ${problem}`);
  }

  const nats = await step(() => startNats(infraContext(), rt)).catch((e) => {
    throw e instanceof StartError ? e : new StartError(`could not start nats-server: ${e.message}`);
  });
  const db = await step(() => startDatabase(infraContext())).catch((e) => {
    throw e instanceof StartError ? e : new StartError(`could not start the embedded PostgreSQL: ${e.message}`);
  });

  let level = env.LOG_LEVEL || 'info';
  if (['warn', 'error', 'fatal', 'silent'].includes(level)) {
    say(`LOG_LEVEL=${level} would hide the "<service> started" lines npm start waits for; services log at info`);
    level = 'info';
  }
  launcher = rt.createServiceLauncher({
    baseEnv: {
      // No process gets a key, bus identity or (on our own server) NATS password it does not hold,
      // whatever the shell exports: the launcher adds each one's own (ADR 0020, 0054, 0055).
      ...rt.inheritableEnv(env, { dropNatsLogin: nats.own }),
      NATS_URL: nats.url,
      DATABASE_URL: db.url,
      GATEWAY_PORT: gatewayPort,
      MCP_PORT: mcpPort,
      KANDEV_STATE_DIR: state,
      LOG_LEVEL: level,
      // Five processes on one host: each takes a free port for /healthz, /readyz and /metrics.
      HEALTH_PORT: '0',
    },
    keys: { operator: keys.operator.secret, agent: keys.agent.secret },
    natsLogin: nats.login,
    // Lifecycle starts before mcp and hands agents http://127.0.0.1:$MCP_PORT/mcp (MCP_PORT is fixed above).
    handMcpUrlToLifecycle: false,
    replicaPort: async () => String(await stablePort()),
    startTimeoutMs: START_TIMEOUT_MS,
    onLog: serviceLog,
    onStarted: supervise,
  });
  writeBusKeys(state, started().busKeys);

  for (const name of names) await step(() => startService(`${name}-1`, () => started().start(name)));
  // KANDEV_REPLICAS=N: N processes of every service, as replicas run (their own INSTANCE_ID, ports
  // and lifecycle state; the same NATS and database). The gateway's and mcp's replicas listen on
  // ports of their own, printed below; agents keep the first mcp's URL.
  for (let n = 2; n <= replicas; n++) {
    for (const name of names) await step(() => startService(`${name}-${n}`, () => started().addReplica(name)));
  }
  inflight = null;

  const urlsOf = (/** @type {StackService} */ n) => started().first(n)?.urls ?? {};
  const gateway = urlsOf('gateway').http;
  const mcp = urlsOf('mcp').mcp;
  let ready = null;
  if (gateway) ready = await waitReady(gateway);
  if (stopping) return;
  const token = await rt.signOperatorToken(keys.operator.secret, { sub: 'local-operator', workspaces: ['*'] });
  // The token goes to a file only its owner can read (issue 53): stdout may be redirected to a file
  // anyone can read, so the token itself is printed only to a terminal.
  const tokenFile = writeOperatorToken(state, token);
  const tokenLines = process.stdout.isTTY
    ? ['  Operator token (all workspaces, valid 12h; also in ' + tokenFile + ', mode 0600):', `  ${token}`]
    : [
        `  Operator token (all workspaces, valid 12h) is in ${tokenFile} (mode 0600; printed only to a terminal)`,
        `  Use it:       export KANDEV_TOKEN="$(cat ${tokenFile})"`,
      ];

  const lines = [
    '',
    `kandev is up (${secs()}${ready === false ? `; gateway /readyz not 200 after ${READY_TIMEOUT_MS / 1000}s, see ${logsDir}` : ''})`,
    gateway ? `  Gateway:   ${gateway}` : '  Gateway:   (not started)',
    ...started()
      .replicas('gateway')
      .map((s) => `             ${s.urls.http} (replica)`),
    gateway ? `  Console:   ${gateway.replace(/\/$/, '')}/ui/` : null,
    mcp ? `  MCP:       ${mcp}` : null,
    `  NATS:      ${nats.url}${nats.own ? ' (started here; a user per service, no anonymous client)' : ' (external: its own users)'}`,
    `  Database:  ${maskUrl(db.url)}${db.own ? ' (embedded, started here)' : ''}`,
    `  State:     ${state}  (logs in ${logsDir})`,
    '  Health:    ' +
      launcher
        .all()
        .map((s) => `${s.name} ${s.urls.health ?? '?'}`)
        .join(', '),
    '',
    ...tokenLines,
    '',
    '  More tokens:  npm run token -- operator [--workspace <id>]...',
    '                npm run token -- agent --task <task-id> [--session <id>] [--mode task|config|office|external]',
    '',
    'Ctrl-C stops everything.',
    '',
  ];
  process.stdout.write(lines.filter((l) => l !== null).join('\n'));
}

/**
 * Stop what we started: services newest first, then NATS and PostgreSQL; then sweep.
 * @param {number} code
 * @param {string} [reason]
 */
function shutdown(code, reason) {
  stopping ??= (async () => {
    say(`stopping${reason ? ` (${reason})` : ''}`);
    const t = performance.now();
    // Let a start-up step in flight finish (each is bounded) so nothing starts behind our back.
    await inflight?.catch(() => undefined);
    await Promise.all([...pendingRestarts]);
    await launcher?.stop({
      async stopOne(svc) {
        const procs = tree(svc.pid);
        const wasRunning = svc.process.exitCode === null && svc.process.signalCode === null;
        await svc.stop(STOP_GRACE_MS);
        const leftovers = await reap(procs);
        const how = svc.process.signalCode ?? `exit code ${svc.process.exitCode}`;
        if (wasRunning && svc.process.signalCode === 'SIGKILL') say(`${svc.name} did not stop within ${STOP_GRACE_MS} ms; killed`);
        say(`${svc.name} stopped (${how})${leftovers.length ? `; reaped leftover pids ${leftovers.join(', ')}` : ''}`);
      },
    });
    if (running.nats) {
      await running.nats.stop();
      say('nats-server stopped');
    }
    if (running.pg) {
      await running.pg.stop();
      say('PostgreSQL stopped');
    }
    const strays = await reap(descendants(process.pid));
    if (strays.length) say(`reaped stray pids ${strays.join(', ')}`);
    releaseLock();
    await Promise.all(logStreams.map((s) => new Promise((r) => s.end(r))));
    say(`stopped in ${secs(t)}`);
    process.exit(code);
  })();
  return stopping;
}

/** A second signal, 2 s or more after the first, skips the grace periods. */
async function forceStop() {
  say('second signal: killing everything now');
  const all = descendants(process.pid);
  for (const p of all) {
    try {
      if (isAlive(p)) process.kill(p.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  await reap(all, 0);
  releaseLock();
  process.exit(1);
}

for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    if (!stopping) {
      firstSignalAt = Date.now();
      void shutdown(0, sig);
    } else if (Date.now() - firstSignalAt >= 2_000) void forceStop();
  });
}
// Started by scripts/start.mjs: if the launcher dies (even by SIGKILL), do not outlive it.
if (process.send) process.once('disconnect', () => void shutdown(1, 'launcher went away'));

main().catch((e) => {
  if (stopping) return;
  say(e instanceof StartError ? e.message : `start failed: ${e?.stack ?? e}`);
  void shutdown(1);
});
