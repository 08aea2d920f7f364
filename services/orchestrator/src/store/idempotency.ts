import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;

export interface IdempotencyRow {
  request_hash: string;
  result: unknown;
}
export interface IdempotencyRef {
  scope: string;
  operation: string;
  key: string;
}

/** Claim a key; true when this request is the first (the unique constraint decides races). */
export async function claimKey(q: Q, ref: IdempotencyRef, requestHash: string): Promise<boolean> {
  const rows = await q`
    INSERT INTO idempotency_keys (scope, operation, key, request_hash) VALUES (${ref.scope}, ${ref.operation}, ${ref.key}, ${requestHash})
    ON CONFLICT ON CONSTRAINT idempotency_keys_unique DO NOTHING RETURNING 1`;
  return rows.length > 0;
}

/** Take over a claim whose first request never finished (crashed) and is older than staleMs. */
export async function reclaimStaleKey(q: Q, ref: IdempotencyRef, requestHash: string, staleMs: number): Promise<boolean> {
  const rows = await q`
    UPDATE idempotency_keys SET created_at = now()
    WHERE scope = ${ref.scope} AND operation = ${ref.operation} AND key = ${ref.key} AND request_hash = ${requestHash}
      AND result IS NULL AND created_at < now() - make_interval(secs => ${staleMs / 1000})
    RETURNING 1`;
  return rows.length > 0;
}

export async function getKey(q: Q, ref: IdempotencyRef): Promise<IdempotencyRow | null> {
  const [row] = await q<
    IdempotencyRow[]
  >`SELECT request_hash, result FROM idempotency_keys WHERE scope = ${ref.scope} AND operation = ${ref.operation} AND key = ${ref.key}`;
  return row ?? null;
}

export async function recordResult(q: Q, ref: IdempotencyRef, result: unknown): Promise<void> {
  await q`UPDATE idempotency_keys SET result = ${q.json(result as never)} WHERE scope = ${ref.scope} AND operation = ${ref.operation} AND key = ${ref.key}`;
}

export async function releaseKey(q: Q, ref: IdempotencyRef): Promise<void> {
  await q`DELETE FROM idempotency_keys WHERE scope = ${ref.scope} AND operation = ${ref.operation} AND key = ${ref.key} AND result IS NULL`;
}

/**
 * Record a key with its answer in the transaction that made the effect (a session, a turn): a
 * retry finds the key exactly when the effect exists, and a rollback takes both away. A concurrent
 * retry serialises on the row lock its flow takes first (the task's, the session's), so it reads
 * this row once committed.
 */
export async function insertAnsweredKey(tx: Tx, ref: IdempotencyRef, requestHash: string, result: unknown): Promise<void> {
  await tx`INSERT INTO idempotency_keys (scope, operation, key, request_hash, result) VALUES (${ref.scope}, ${ref.operation}, ${ref.key}, ${requestHash}, ${tx.json(result as never)})`;
}

/** Housekeeping: keys older than keepMs (their retries are long over). */
export async function purgeKeys(q: Q, keepMs: number): Promise<number> {
  const rows = await q`DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(secs => ${keepMs / 1000}) RETURNING 1`;
  return rows.length;
}
