import type { Sql } from '@kandev/runtime';

export interface PendingCount {
  count: number;
  oldestAgeS: number;
}

/**
 * What waits on a person across the whole deployment: unanswered question bundles and undecided
 * permission requests, with the age of the oldest of each. One statement over the partial
 * `status = 'pending'` indexes; read at scrape time, so every orchestrator replica reports the same
 * number (alerts and panels take `max`, never `sum`).
 */
export async function pendingForPeople(sql: Sql): Promise<{ questions: PendingCount; permissions: PendingCount }> {
  const [row] = await sql<{ q: number; q_age: number; p: number; p_age: number }[]>`
    SELECT q.n AS q, q.age AS q_age, p.n AS p, p.age AS p_age FROM
      (SELECT count(*)::int AS n, COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8 AS age
         FROM clarification_bundles WHERE status = 'pending') q,
      (SELECT count(*)::int AS n, COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8 AS age
         FROM permission_requests WHERE status = 'pending') p`;
  return { questions: { count: row!.q, oldestAgeS: row!.q_age }, permissions: { count: row!.p, oldestAgeS: row!.p_age } };
}
