import { validationError } from '@kandev/contracts';

/*
 * Keyset paging of the read surface (R-8.1, docs/limits.md). Listings are ordered newest first by
 * (created_at, id); a cursor is the sort key of the last row a page returned, base64url-encoded JSON
 * (opaque to clients). The next page is the rows strictly after that key, so rows inserted while a
 * client pages never shift a page: no row that existed when paging began is skipped or repeated.
 */

export interface SortKey {
  /** created_at at full (microsecond) precision, as PostgreSQL prints it. */
  ts: string;
  id: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// PostgreSQL's text form of a timestamptz: 2026-12-03 09:30:01.123456+00 (fraction and offset minutes optional).
const PG_TS = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?[+-]\d{2}(:\d{2})?$/;

export const encodeCursor = (k: SortKey): string => Buffer.from(JSON.stringify([k.ts, k.id]), 'utf8').toString('base64url');

/** A cursor this service made, or VALIDATION_ERROR (a cursor is never trusted into SQL unchecked). */
export function decodeCursor(cursor: string): SortKey {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw validationError('invalid cursor', { param: 'cursor' });
  }
  if (
    !Array.isArray(parsed) ||
    parsed.length !== 2 ||
    typeof parsed[0] !== 'string' ||
    typeof parsed[1] !== 'string' ||
    !PG_TS.test(parsed[0]) ||
    !UUID.test(parsed[1])
  ) {
    throw validationError('invalid cursor', { param: 'cursor' });
  }
  return { ts: parsed[0], id: parsed[1] };
}

/** The page size asked for, within [1, max]; absent = the default. A larger one is clamped, not refused. */
export const pageSize = (limit: number | undefined, bounds: { default: number; max: number }): number => Math.min(limit ?? bounds.default, bounds.max);

/**
 * A page from `limit + 1` rows fetched: the first `limit`, and the cursor after the last of them
 * when there was one more (null = this is the last page).
 */
export function pageOf<R extends { sort_ts: string; id: string }>(rows: R[], limit: number): { rows: R[]; next_cursor: string | null } {
  if (rows.length <= limit) return { rows, next_cursor: null };
  const page = rows.slice(0, limit);
  const last = page[page.length - 1]!;
  return { rows: page, next_cursor: encodeCursor({ ts: last.sort_ts, id: last.id }) };
}

/** `q` as an ILIKE pattern matching titles that contain it: its own %, _ and \ match themselves. */
export const containsPattern = (q: string): string => `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
