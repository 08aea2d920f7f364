import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnNatsServer, type NatsServerHandle } from '@kandev/runtime/dev/nats-server';

export interface TestNats extends NatsServerHandle {
  storeDir: string;
}

/** A real nats-server -js of this test's own, on a random port, with a throwaway store. */
export async function startNats(opts: { configFile?: string } = {}): Promise<TestNats> {
  const storeDir = mkdtempSync(join(tmpdir(), 'kandev-nats-'));
  const h = await spawnNatsServer({ storeDir, ...(opts.configFile ? { configFile: opts.configFile } : {}) });
  return {
    ...h,
    storeDir,
    stop: async () => {
      await h.stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
