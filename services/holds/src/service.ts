import { fileURLToPath } from 'node:url';
import type { ServiceDefinition } from '@kandev/runtime';
import { HoldsEnv } from './env.js';

/** Tree holds, the wakeup queue and gate, cost events (SPEC R-4). Endpoints land with the tree-controls issue. */
export const holdsService: ServiceDefinition<typeof HoldsEnv> = {
  name: 'holds',
  env: HoldsEnv,
  schema: 'holds',
  migrationsDir: fileURLToPath(new URL('../migrations', import.meta.url)),
  async start() {},
};
