// npm start's own NATS and PostgreSQL (scripts/lib/stack.mjs): the ones the environment names, used
// as they are, or started here in the state dir. A server started here is handed to `ctx.watch`, so
// that stack.mjs's supervision starts it again on the same port and data when it exits.
import { dirname, join } from 'node:path';
import { statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startEmbeddedPostgres } from './embedded-pg.mjs';
import { canConnect, firstNatsServer, portFree, stablePort } from './net.mjs';
import { StartError, makeTraversable } from './state.mjs';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const env = process.env;

/**
 * @typedef {import('@kandev/testkit/launcher').StackService} StackService
 * @typedef {{ url: string, port: number, pid: number | undefined, process: import('node:child_process').ChildProcess, stop(): Promise<unknown> }} Infra
 * @typedef {{
 *   state: string,
 *   logsDir: string,
 *   say: (msg: string) => void,
 *   logStream: (file: string) => import('node:fs').WriteStream,
 *   running: { nats: Infra | null, pg: Infra | null },
 *   watch: (child: import('node:child_process').ChildProcess, label: string, restart: () => Promise<void>) => void,
 * }} InfraContext
 * @typedef {{
 *   writeNatsAuthConfig: typeof import('@kandev/runtime/dev/nats-auth').writeNatsAuthConfig,
 *   spawnNatsServer: typeof import('@kandev/runtime/dev/nats-server').spawnNatsServer,
 * }} NatsRuntime
 */

/**
 * The NATS the services use. One named by NATS_URL (reachable) is used as it is, with the shell's
 * NATS_USER / NATS_PASS if any: its users are its own (each service reports `nats_auth` on
 * /readyz). Otherwise, and always when NATS_URL is unset (a server that merely answers on the
 * default port may admit anyone, as Debian's does), a nats-server of our own that admits only the
 * services (ADR 0054): a config in the state dir (0700, the file 0600) that includes
 * deploy/nats/permissions.conf, a random password per service for each start, handed to each
 * service as NATS_USER / NATS_PASS.
 * @param {InfraContext} ctx
 * @param {NatsRuntime} rt
 * @returns {Promise<{ url: string, own: boolean, login: (name: StackService) => { user?: string, pass?: string } }>}
 */
export async function startNats(ctx, rt) {
  const { state, logsDir, say, logStream, running, watch } = ctx;
  if (env.NATS_URL) {
    const { host, port } = firstNatsServer(env.NATS_URL);
    if (await canConnect(host, port, 500)) {
      say(
        `using NATS at ${env.NATS_URL} (not started here: it admits whom its own config admits${env.NATS_USER ? `; services log in as ${env.NATS_USER}` : '; services connect without a user'}, see nats_auth on /readyz)`,
      );
      return { url: env.NATS_URL, own: false, login: () => ({}) };
    }
    say(`NATS_URL ${env.NATS_URL} is not reachable; starting a nats-server of our own`);
  }
  const storeDir = join(state, 'nats');
  const auth = rt.writeNatsAuthConfig({ dir: join(state, 'nats-auth'), permissionsFile: join(ROOT, 'deploy/nats/permissions.conf') });
  const out = logStream(join(logsDir, 'nats-server.log'));
  /** @param {number} port */
  const launch = async (port) => {
    const handle = await rt.spawnNatsServer({ storeDir, port, configFile: auth.configFile });
    running.nats = handle;
    handle.process.stderr?.on('data', (/** @type {Buffer} */ d) => out.write(d));
    watch(handle.process, 'nats-server', async () => {
      const again = await launch(handle.port);
      say(`nats-server restarted (pid ${again.pid})`);
    });
    return handle;
  };
  const handle = await launch((await portFree(4222)) ? 4222 : -1);
  say(`nats-server ${handle.url} (pid ${handle.pid}, JetStream store ${storeDir}; a user per service, no anonymous client: ${auth.configFile})`);
  const login = (/** @type {StackService} */ name) => ({ user: auth.users[name].user, pass: auth.users[name].pass });
  return { url: handle.url, own: true, login };
}

/**
 * As root, the embedded server runs as `postgres`, which must reach the data dir.
 * @param {string} dir
 */
function checkTraversable(dir) {
  makeTraversable(dir);
  for (let d = dirname(dir); ; d = dirname(d)) {
    if ((statSync(d).mode & 0o001) === 0) {
      throw new StartError(
        `PostgreSQL runs as the 'postgres' user here (we are root) and cannot enter ${d} (mode ${(statSync(d).mode & 0o777).toString(8)}). Use a KANDEV_STATE_DIR outside it, or chmod o+x ${d}.`,
      );
    }
    if (d === dirname(d)) break;
  }
}

/** @param {InfraContext} ctx */
export async function startDatabase(ctx) {
  const { state, logsDir, say, running, watch } = ctx;
  if (env.DATABASE_URL) {
    say('using DATABASE_URL');
    return { url: env.DATABASE_URL, own: false };
  }
  if (process.getuid?.() === 0) checkTraversable(state);
  const t = performance.now();
  /**
   * @param {number} port
   * @returns {Promise<Infra>}
   */
  const launch = async (port) => {
    const pg = await startEmbeddedPostgres({
      dataDir: join(state, 'pg'),
      credentialsFile: join(state, 'pg-credentials.json'),
      logFile: join(logsDir, 'postgres.log'),
      port,
      log: say,
    });
    running.pg = pg;
    watch(pg.process, 'PostgreSQL', async () => {
      const again = await launch(pg.port);
      say(`PostgreSQL restarted (pid ${again.pid})`);
    });
    return pg;
  };
  const pg = await launch(await stablePort());
  say(`embedded PostgreSQL on 127.0.0.1:${pg.port} (pid ${pg.pid}, ${((performance.now() - t) / 1000).toFixed(1)}s)`);
  return { url: pg.url, own: true };
}
