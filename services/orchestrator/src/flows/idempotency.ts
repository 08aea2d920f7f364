import { createHash } from 'node:crypto';
import { conflict } from '@kandev/contracts';
import { claimKey, getKey, recordResult, reclaimStaleKey, releaseKey, type IdempotencyRef } from '../store/idempotency.js';
import type { OrchRuntime } from './context.js';

/** What a keyed operation may do besides returning: record a result early, once it has had an effect. */
export interface Idempotent<T> {
  /** The answer a retry gets from now on, even if the rest of the operation fails. */
  checkpoint(result: T): Promise<void>;
}

/** The request's own fields, hashed: who asked, the key and the credential are not part of it. */
export function requestHash(fields: Record<string, unknown>): string {
  const { actor: _a, agent_token: _t, idempotency_key: _k, ...own } = fields;
  return createHash('sha256').update(JSON.stringify(own)).digest('hex');
}

/**
 * Run `fn` at most once per (scope, operation, key). A repeat answers with the recorded result; a
 * repeat while the first is still running, or with different fields, is a CONFLICT. A failure
 * before any checkpoint releases the key (nothing happened, a retry may act); after a checkpoint
 * the retry gets that checkpoint. No key: just run.
 */
export async function once<T>(
  rt: OrchRuntime,
  ref: Omit<IdempotencyRef, 'key'> & { key: string | undefined },
  fields: Record<string, unknown>,
  fn: (idem: Idempotent<T>) => Promise<T>,
): Promise<T> {
  const noop: Idempotent<T> = { checkpoint: async () => undefined };
  if (!ref.key) return fn(noop);
  const key: IdempotencyRef = { scope: ref.scope, operation: ref.operation, key: ref.key };
  const hash = requestHash(fields);
  let claimed = await claimKey(rt.sql, key, hash);
  if (!claimed) {
    const existing = await getKey(rt.sql, key);
    if (!existing) {
      claimed = await claimKey(rt.sql, key, hash); // released by a failed first attempt meanwhile
    } else {
      if (existing.request_hash !== hash) throw conflict('idempotency_key was already used for a different request', { idempotency_key: ref.key });
      if (existing.result !== null) return existing.result as T;
      claimed = await reclaimStaleKey(rt.sql, key, hash, rt.env.IDEMPOTENCY_STALE_MS);
    }
  }
  if (!claimed) throw conflict('a request with this idempotency_key is in progress; retry later', { idempotency_key: ref.key });
  let checkpointed = false;
  try {
    const result = await fn({
      checkpoint: async (r) => {
        await recordResult(rt.sql, key, r);
        checkpointed = true;
      },
    });
    await recordResult(rt.sql, key, result);
    return result;
  } catch (e) {
    if (!checkpointed) await releaseKey(rt.sql, key).catch((err) => rt.log.warn({ err }, 'could not release idempotency key'));
    throw e;
  }
}
