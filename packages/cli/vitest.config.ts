import { defineConfig } from 'vitest/config';

// Pure tests of the CLI (arguments, tables); the CLI against a real stack is e2e/test/cli.test.ts.
export default defineConfig({ test: { include: ['test/**/*.test.ts'] } });
