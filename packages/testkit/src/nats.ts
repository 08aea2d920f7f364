import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnNatsServer, type NatsServerHandle } from '@kandev/runtime/dev/nats-server';

export interface TestNats extends NatsServerHandle {
  storeDir: string;
  /**
   * Fault injection: stop the server (clients see it go), keep it down for `downMs`, start it again
   * on the same port with the same JetStream store.
   */
  restart(downMs?: number): Promise<void>;
}

/** A real nats-server -js of this test's own, on a random port, with a throwaway store. */
export async function startNats(opts: { configFile?: string } = {}): Promise<TestNats> {
  const storeDir = mkdtempSync(join(tmpdir(), 'kandev-nats-'));
  const spawnIt = (port?: number) => spawnNatsServer({ storeDir, ...(opts.configFile ? { configFile: opts.configFile } : {}), ...(port !== undefined ? { port } : {}) });
  let current = await spawnIt();
  const t: TestNats = {
    ...current,
    storeDir,
    stop: async () => {
      await current.stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
    restart: async (downMs = 0) => {
      await current.stop();
      if (downMs) await new Promise((r) => setTimeout(r, downMs));
      current = await spawnIt(t.port);
      t.pid = current.pid;
      t.process = current.process;
    },
  };
  return t;
}
