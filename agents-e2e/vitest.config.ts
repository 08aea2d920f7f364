import { defineConfig } from 'vitest/config';

// Each file starts a whole stack, a model stub and the published agents (Codex's native binary,
// Claude Code on Node): run files one at a time on 2 cores, with room for their start-up.
export default defineConfig({
  test: { include: ['test/**/*.test.ts'], testTimeout: 120_000, hookTimeout: 90_000, pool: 'forks', isolate: false, fileParallelism: false },
});
