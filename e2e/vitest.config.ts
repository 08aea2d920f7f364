import { defineConfig } from 'vitest/config';

// Files run one at a time on 2 cores, in one worker that imports the test code once (isolate: false,
// as vitest.shared.ts explains). A file that needs its own settings or changes the stack (kills,
// restarts, replicas) starts its own (`startWorld`); the others attach to one shared stack that the
// global setup starts for the run (`sharedWorld`, test/shared-stack.setup.ts).
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/shared-stack.setup.ts'],
    setupFiles: ['test/failure-logs.ts'],
    testTimeout: 120_000,
    hookTimeout: 90_000,
    pool: 'forks',
    isolate: false,
    fileParallelism: false,
  },
});
