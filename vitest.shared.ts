import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

/**
 * The vitest settings of the packages whose files start real servers (NATS, PostgreSQL, services,
 * child processes). Those files mostly wait, so more files than cores run at once: vitest's own
 * default is cores - 1, a single worker on a 2-core CI runner (docs/testing.md).
 *
 * `isolate: false`: a worker imports the code under test once and runs file after file in it,
 * instead of a fresh module graph per file. The files share nothing else (each starts its own
 * servers and databases), and none mocks modules or changes process.env for good; importing was
 * a third of the service packages' time (docs/testing.md).
 */
export function serverTestConfig(env: Record<string, string> = {}) {
  return defineConfig({
    test: {
      include: ['test/**/*.test.ts'],
      // Hang guards: these files run niced beside e2e's stacks (scripts/test.mjs), where a step that
      // takes a second alone has taken ten on a busy runner. The operations' own bounds stay theirs.
      testTimeout: 60_000,
      hookTimeout: 60_000,
      pool: 'forks',
      isolate: false,
      maxWorkers: Math.max(4, availableParallelism() - 1),
      env,
    },
  });
}

/** Services refuse to start without a secret; harnesses that pass process.env get this one. */
export const testJwtSecret = (): Record<string, string> => ({ KANDEV_JWT_SECRET: process.env.KANDEV_JWT_SECRET ?? 'vitest-secret-0123456789abcdef' });
