import { validationError } from '@kandev/contracts';

/*
 * Query strings of the read routes → the fields of their contract requests. Only the
 * shape of each parameter is decided here (a number is a number, a flag is true/false); the
 * contract validates the values (UUIDs, statuses, bounds) and answers VALIDATION_ERROR with its issues.
 */

export type Query = Record<string, string | string[] | undefined>;

function single(q: Query, name: string): string | undefined {
  const v = q[name];
  if (Array.isArray(v)) throw validationError(`query parameter ${name} may be given once`, { param: name });
  return v === '' ? undefined : v;
}

function int(q: Query, name: string): number | undefined {
  const v = single(q, name);
  if (v === undefined) return undefined;
  if (!/^\d{1,9}$/.test(v)) throw validationError(`query parameter ${name} must be a non-negative integer`, { param: name });
  return Number(v);
}

function flag(q: Query, name: string): boolean | undefined {
  const v = single(q, name);
  if (v === undefined) return undefined;
  if (v !== 'true' && v !== 'false') throw validationError(`query parameter ${name} must be true or false`, { param: name });
  return v === 'true';
}

const defined = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

export const workspaceListQuery = (q: Query) => defined({ limit: int(q, 'limit'), cursor: single(q, 'cursor') });

/** `status` is one status, a comma list, or the parameter repeated: any of them. */
export function taskListQuery(q: Query) {
  const workspaceId = single(q, 'workspace_id');
  if (workspaceId === undefined) throw validationError('query parameter workspace_id is required', { param: 'workspace_id' });
  const raw = q.status;
  const statuses =
    raw === undefined
      ? undefined
      : (Array.isArray(raw) ? raw : [raw])
          .flatMap((s) => s.split(','))
          .map((s) => s.trim())
          .filter((s) => s !== '');
  return defined({
    workspace_id: workspaceId,
    parent_id: single(q, 'parent_id'),
    roots: flag(q, 'roots'),
    status: statuses?.length ? statuses : undefined,
    q: single(q, 'q'),
    archived: flag(q, 'archived'),
    limit: int(q, 'limit'),
    cursor: single(q, 'cursor'),
  });
}

/** `cursor` (the next_cursor of a previous page) is accepted as after_seq too. */
export function messagesQuery(q: Query) {
  const afterSeq = int(q, 'after_seq');
  const cursor = int(q, 'cursor');
  if (afterSeq !== undefined && cursor !== undefined && afterSeq !== cursor)
    throw validationError('after_seq and cursor disagree', { params: ['after_seq', 'cursor'] });
  return defined({ after_seq: afterSeq ?? cursor, limit: int(q, 'limit') });
}

/** `GET /inbox?workspace_id` (required). */
export function inboxQuery(q: Query) {
  const workspaceId = single(q, 'workspace_id');
  if (workspaceId === undefined) throw validationError('query parameter workspace_id is required', { param: 'workspace_id' });
  return { workspace_id: workspaceId };
}
