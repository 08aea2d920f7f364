import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnNatsServer, type NatsServerHandle } from '@kandev/runtime/dev/nats-server';

export interface TestNats extends NatsServerHandle {
  storeDir: string;
  /** What the server logged since it started listening (permission violations show up here). */
  output(): string;
}

/** A real nats-server -js of this test's own, on a random port, with a throwaway store. */
export async function startNats(opts: { configFile?: string } = {}): Promise<TestNats> {
  const storeDir = mkdtempSync(join(tmpdir(), 'kandev-nats-'));
  const h = await spawnNatsServer({ storeDir, ...(opts.configFile ? { configFile: opts.configFile } : {}) });
  let out = '';
  h.process.stderr?.on('data', (d: Buffer) => {
    if (out.length < 1_000_000) out += d.toString();
  });
  return {
    ...h,
    storeDir,
    output: () => out,
    stop: async () => {
      await h.stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
