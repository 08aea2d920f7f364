import { defineConfig } from 'vitest/config';

// `npm run test:quarantine`: tests that fail intermittently for a reason not yet found, kept out of
// `npm test` so they cannot block a landing, and run here until fixed. Each file says why it is here.
export default defineConfig({
  test: { include: ['quarantine/**/*.test.ts'], testTimeout: 120_000, hookTimeout: 90_000, pool: 'forks', fileParallelism: false },
});
