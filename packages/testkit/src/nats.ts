import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnNatsServer, type NatsServerHandle } from '@kandev/runtime/dev/nats-server';
import { writeNatsAuthConfig, type NatsCredentials, type NatsServiceUser } from '@kandev/runtime/dev/nats-auth';
import { repoRoot } from './paths.js';

/** The single source of the services' NATS permissions (ADR 0054). */
export const NATS_PERMISSIONS_FILE = join(repoRoot, 'deploy/nats/permissions.conf');

export interface TestNats extends NatsServerHandle {
  storeDir: string;
  /** What the server logged since it started listening (permission violations show up here). */
  output(): string;
  /**
   * Fault injection: stop the server (clients see it go), keep it down for `downMs`, start it again
   * on the same port with the same JetStream store.
   */
  restart(downMs?: number): Promise<void>;
  /**
   * On an authenticated server (`auth`): each service's user and password (deploy/nats/permissions.conf),
   * and `observer`, the test's own user with every right (to watch the bus, create probe streams).
   * Undefined on an open server.
   */
  credentials?: Record<NatsServiceUser, NatsCredentials> & { observer: NatsCredentials };
}

/** The connect options of a user of `nats` (`{}` on an open server): `connectNats({ url, name, ...natsLogin(nats, 'mcp') })`. */
export function natsLogin(nats: TestNats, user: NatsServiceUser | 'observer' = 'observer'): { user?: string; pass?: string } {
  const c = nats.credentials?.[user];
  return c ? { user: c.user, pass: c.pass } : {};
}

/**
 * A real nats-server -js of this test's own, on a random port, with a throwaway store. `auth`: as
 * the whole-stack fixtures run it, a user per service under deploy/nats/permissions.conf with random
 * passwords (and the test's observer), no anonymous client. Without it the server is open: for
 * service-level tests that play other services at the subject level.
 */
export async function startNats(opts: { configFile?: string; auth?: boolean } = {}): Promise<TestNats> {
  const storeDir = mkdtempSync(join(tmpdir(), 'kandev-nats-'));
  const auth = opts.auth ? writeNatsAuthConfig({ dir: join(storeDir, 'auth'), permissionsFile: NATS_PERMISSIONS_FILE, observer: true }) : undefined;
  const configFile = auth?.configFile ?? opts.configFile;
  const spawnIt = (port?: number) =>
    spawnNatsServer({ storeDir: join(storeDir, 'js'), ...(configFile ? { configFile } : {}), ...(port !== undefined ? { port } : {}) });
  let out = '';
  // What every incarnation of the server logged (permission violations show up here).
  const capture = (h: NatsServerHandle) =>
    h.process.stderr?.on('data', (d: Buffer) => {
      if (out.length < 1_000_000) out += d.toString();
    });
  let current = await spawnIt();
  capture(current);
  const t: TestNats = {
    ...current,
    storeDir,
    output: () => out,
    ...(auth ? { credentials: { ...auth.users, observer: auth.observer! } } : {}),
    stop: async () => {
      await current.stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
    restart: async (downMs = 0) => {
      await current.stop();
      if (downMs) await new Promise((r) => setTimeout(r, downMs));
      current = await spawnIt(t.port);
      capture(current);
      t.pid = current.pid;
      t.process = current.process;
    },
  };
  return t;
}
