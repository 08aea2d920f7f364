import { defineConfig } from 'vitest/config';

// `npm run test:scale`: the scale-out matrix (a 3-node NATS cluster, 2 processes of every service,
// replica and node loss), kept out of `npm test` for its length. One stack per file, one file at a time.
export default defineConfig({
  test: { include: ['scale/**/*.test.ts'], testTimeout: 180_000, hookTimeout: 180_000, pool: 'forks', isolate: false, fileParallelism: false },
});
