import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

// Files mostly wait on NATS, PostgreSQL and child processes, so more files than cores run at once:
// vitest's own default is cores - 1, a single worker on a 2-core CI runner (docs/testing.md).
const maxWorkers = Math.max(4, availableParallelism() - 1);

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    maxWorkers,
    // Services refuse to start without a secret; harnesses that pass process.env get this one.
    env: { KANDEV_JWT_SECRET: process.env.KANDEV_JWT_SECRET ?? 'vitest-secret-0123456789abcdef' },
  },
});
