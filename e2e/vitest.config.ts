import { defineConfig } from 'vitest/config';

// Each file starts a whole stack (5 services + agents): run files one at a time on 2 cores, in one
// worker that imports the test code once (isolate: false, as vitest.shared.ts explains).
export default defineConfig({
  test: { include: ['test/**/*.test.ts'], testTimeout: 120_000, hookTimeout: 90_000, pool: 'forks', isolate: false, fileParallelism: false },
});
