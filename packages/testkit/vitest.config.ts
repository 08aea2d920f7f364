import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // test/agents/** (scripted agents) and test/start.test.ts (the whole `npm start` stack).
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
  },
});
