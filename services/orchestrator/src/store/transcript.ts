import type { SessionMessageData, TranscriptItem } from '@kandev/contracts';
import { transaction, type Sql, type Tx } from '@kandev/runtime';
import {
  DEFAULT_TRANSCRIPT_CAPS,
  planTranscriptAppend,
  planTranscriptRun,
  type TranscriptCaps,
  type TranscriptInput,
  type TranscriptPiece,
  type TranscriptState,
  type TranscriptWrite,
} from '../domain/transcript.js';

type Q = Sql | Tx;

export type { TranscriptInput };

interface StateRow {
  next_seq: string;
  bytes: string;
  items: number;
  truncated: boolean;
  open_seq: string | null;
  open_turn_id: string | null;
  open_bytes: number;
}

const toState = (r: StateRow): TranscriptState => ({
  next_seq: Number(r.next_seq),
  bytes: Number(r.bytes),
  items: r.items,
  truncated: r.truncated,
  open: r.open_seq === null ? null : { seq: Number(r.open_seq), turn_id: r.open_turn_id, bytes: r.open_bytes },
});

const isSql = (q: Q): q is Sql => typeof (q as Sql).begin === 'function';

/**
 * Append one piece to a session's transcript: a prompt, a chunk of agent text (coalesced
 * into the open item of its turn), a tool call or result, a permission request, a question. Runs
 * in the caller's transaction when given one (so the item commits with what it records), or in its
 * own. Appends of one session serialise on its transcript_state row, which numbers the items.
 *
 * Returns what was written, as `session.message` payloads: the caller stages them as events (see
 * flows/transcript.ts `recordTranscript`, which does both). Nothing is written for a session that
 * does not exist, or past the session's cap (one `truncated` marker, then nothing).
 *
 * `kind` values: prompt, agent_text, tool_call, tool_result, permission_request, question
 * (`truncated` is the store's own marker); see TranscriptKind in @kandev/contracts (read.ts).
 */
export async function appendTranscriptItem(
  q: Q,
  input: TranscriptInput & { session_id: string },
  caps: TranscriptCaps = DEFAULT_TRANSCRIPT_CAPS,
): Promise<SessionMessageData[]> {
  if (isSql(q)) return transaction(q, (tx) => appendIn(tx, input, caps));
  return appendIn(q, input, caps);
}

const appendIn = (tx: Tx, input: TranscriptInput & { session_id: string }, caps: TranscriptCaps) =>
  writePlanned(tx, input.session_id, (state) => planTranscriptAppend(state, input, caps));

/**
 * Append a run of one session's pieces in the caller's transaction (the transcript consumer's
 * batch, ADR 0035): one lock of the session's state row, one write per item touched. Pieces whose
 * id is not in `fresh` (what the inbox did not already hold) add nothing; see planTranscriptRun.
 */
export function appendTranscriptRun(
  tx: Tx,
  sessionId: string,
  pieces: readonly TranscriptPiece[],
  fresh: ReadonlySet<string>,
  caps: TranscriptCaps = DEFAULT_TRANSCRIPT_CAPS,
): Promise<SessionMessageData[]> {
  return writePlanned(tx, sessionId, (state) => planTranscriptRun(state, pieces, fresh, caps));
}

async function writePlanned(
  tx: Tx,
  sessionId: string,
  plan: (state: TranscriptState) => { writes: TranscriptWrite[]; state: TranscriptState },
): Promise<SessionMessageData[]> {
  // Creates the session's state row on its first item and locks it either way, in one statement.
  const [row] = await tx<StateRow[]>`
    INSERT INTO transcript_state (session_id) SELECT id FROM sessions WHERE id = ${sessionId}
    ON CONFLICT (session_id) DO UPDATE SET session_id = EXCLUDED.session_id
    RETURNING next_seq, bytes, items, truncated, open_seq, open_turn_id, open_bytes`;
  if (!row) return [];
  const { writes, state } = plan(toState(row));
  if (!writes.length) return [];
  const out: SessionMessageData[] = [];
  for (const w of writes) {
    if (w.op === 'created') {
      const [r] = await tx<{ created_at: string }[]>`
        INSERT INTO transcript_items (session_id, seq, turn_id, role, kind, text, meta)
        VALUES (${sessionId}, ${w.seq}, ${w.turn_id}, ${w.role}, ${w.kind}, ${w.text}, ${tx.json(w.meta as never)}) RETURNING created_at`;
      out.push({ op: 'created', seq: w.seq, turn_id: w.turn_id, role: w.role, kind: w.kind, text: w.text, meta: w.meta, created_at: r!.created_at });
    } else {
      const [r] = await tx<{ created_at: string; offset: number }[]>`
        UPDATE transcript_items SET text = text || ${w.text}::text, updated_at = now() WHERE session_id = ${sessionId} AND seq = ${w.seq}
        RETURNING created_at, octet_length(text) - octet_length(${w.text}::text) AS "offset"`;
      out.push({
        op: 'appended',
        seq: w.seq,
        turn_id: w.turn_id,
        role: w.role,
        kind: w.kind,
        text: w.text,
        meta: w.meta,
        created_at: r!.created_at,
        offset: Number(r!.offset),
      });
    }
  }
  await tx`
    UPDATE transcript_state SET next_seq = ${state.next_seq}, bytes = ${state.bytes}, items = ${state.items}, truncated = ${state.truncated},
      open_seq = ${state.open?.seq ?? null}, open_turn_id = ${state.open?.turn_id ?? null}, open_bytes = ${state.open?.bytes ?? 0}
    WHERE session_id = ${sessionId}`;
  return out;
}

/** A page of a session's transcript, oldest first, after `afterSeq`. */
export async function transcriptPage(q: Q, sessionId: string, afterSeq: number, limit: number): Promise<TranscriptItem[]> {
  const rows = await q<
    Array<{
      seq: string;
      turn_id: string | null;
      role: TranscriptItem['role'];
      kind: TranscriptItem['kind'];
      text: string;
      meta: Record<string, unknown>;
      created_at: string;
    }>
  >`SELECT seq, turn_id, role, kind, text, meta, created_at FROM transcript_items WHERE session_id = ${sessionId} AND seq > ${afterSeq} ORDER BY seq LIMIT ${limit}`;
  return rows.map((r) => ({ seq: Number(r.seq), turn_id: r.turn_id, role: r.role, kind: r.kind, text: r.text, meta: r.meta, created_at: r.created_at }));
}
