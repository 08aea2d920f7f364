import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Every test spawns real agentctl and agent processes.
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
