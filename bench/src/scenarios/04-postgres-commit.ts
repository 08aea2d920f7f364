import type { Scenario } from '../scenario.js';
import { measure } from '../stats.js';

/** The cost of making one row durable, the unit of work behind every state change. */
const scenario: Scenario = {
  name: 'PostgreSQL commit',
  async run(ctx) {
    const sql = ctx.sql({ max: 1 });
    await sql`CREATE TABLE bench_commit (id bigint PRIMARY KEY, payload text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`;
    ctx.defer(() => sql`DROP TABLE IF EXISTS bench_commit`);
    const payload = 'x'.repeat(64);
    const tx = await measure((i) => sql.begin((t) => t`INSERT INTO bench_commit (id, payload) VALUES (${i}, ${payload})`), ctx);
    const offset = 10_000_000;
    const auto = await measure((i) => sql`INSERT INTO bench_commit (id, payload) VALUES (${offset + i}, ${payload})`, ctx);
    return [
      { id: 'pg.commit.transaction', label: '`sql.begin`: BEGIN; INSERT one row; COMMIT', stats: tx },
      { id: 'pg.commit.autocommit', label: 'one INSERT, autocommit (its own implicit transaction)', stats: auto },
    ];
  },
};
export default scenario;
