import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'], testTimeout: 30_000, hookTimeout: 30_000, pool: 'forks',
    // Services refuse to start without a secret; harnesses that pass process.env get this one.
    env: { KANDEV_JWT_SECRET: process.env.KANDEV_JWT_SECRET ?? 'vitest-secret-0123456789abcdef' },
  },
});
