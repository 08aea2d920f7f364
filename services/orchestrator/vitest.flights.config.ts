import { defineConfig } from 'vitest/config';

// `npm run flights`: measurements of the stop's PostgreSQL flights (flights/), kept out of `npm test`.
export default defineConfig({
  test: { include: ['flights/**/*.test.ts'], testTimeout: 900_000, hookTimeout: 60_000, pool: 'forks', env: { KANDEV_JWT_SECRET: process.env.KANDEV_JWT_SECRET ?? 'vitest-secret-0123456789abcdef' } },
});
