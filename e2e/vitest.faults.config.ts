import { defineConfig } from 'vitest/config';

// `npm run test:faults`: the long fault-injection tests (stalls past the registry TTL, restarts of
// infrastructure), kept out of `npm test`. One stack per file, one file at a time.
export default defineConfig({
  test: { include: ['faults/**/*.test.ts'], testTimeout: 180_000, hookTimeout: 120_000, pool: 'forks', isolate: false, fileParallelism: false },
});
