import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnNatsServer, type NatsServerHandle } from '@kandev/runtime/dev/nats-server';

export interface TestNats extends NatsServerHandle {
  storeDir: string;
  /** What the server logged since it started listening (permission violations show up here). */
  output(): string;
  /**
   * Fault injection: stop the server (clients see it go), keep it down for `downMs`, start it again
   * on the same port with the same JetStream store.
   */
  restart(downMs?: number): Promise<void>;
}

/** A real nats-server -js of this test's own, on a random port, with a throwaway store. */
export async function startNats(opts: { configFile?: string } = {}): Promise<TestNats> {
  const storeDir = mkdtempSync(join(tmpdir(), 'kandev-nats-'));
  const spawnIt = (port?: number) =>
    spawnNatsServer({ storeDir, ...(opts.configFile ? { configFile: opts.configFile } : {}), ...(port !== undefined ? { port } : {}) });
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
