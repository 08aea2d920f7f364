import type { TranscriptKind, TranscriptRole } from '@kandev/contracts';

/*
 * The transcript's rules (R-8.2, ADR 0022) as plain functions: how an incoming piece of text
 * becomes writes (a new item, or text appended to the open agent_text item), and the caps that
 * bound what one session keeps (docs/limits.md).
 */

export interface TranscriptCaps {
  /** Bytes (UTF-8) of one item's text. Longer agent text continues in a new item; any other item is cut. */
  itemBytes: number;
  /** Bytes (UTF-8) of all a session's item texts. Past it nothing more is kept but one `truncated` marker. */
  sessionBytes: number;
  /** Items of one session, the marker included. */
  sessionItems: number;
}

export const DEFAULT_TRANSCRIPT_CAPS: TranscriptCaps = { itemBytes: 64 * 1024, sessionBytes: 5 * 1024 * 1024, sessionItems: 10_000 };

/** What the store keeps per session (table transcript_state). */
export interface TranscriptState {
  next_seq: number;
  bytes: number;
  items: number;
  truncated: boolean;
  /** The agent_text item chunks are appended to, while it is open. */
  open: { seq: number; turn_id: string | null; bytes: number } | null;
}

export const EMPTY_TRANSCRIPT: TranscriptState = { next_seq: 1, bytes: 0, items: 0, truncated: false, open: null };

export interface TranscriptInput {
  turn_id: string | null;
  role: TranscriptRole;
  kind: TranscriptKind;
  text: string;
  meta?: Record<string, unknown>;
}

export type TranscriptWrite =
  | { op: 'created'; seq: number; turn_id: string | null; role: TranscriptRole; kind: TranscriptKind; text: string; meta: Record<string, unknown> }
  | { op: 'appended'; seq: number; turn_id: string | null; role: TranscriptRole; kind: TranscriptKind; text: string; meta: Record<string, unknown> };

export const TRUNCATED_MARKER_TEXT = 'transcript truncated: this session reached its size cap; later items were not kept';

export const utf8Bytes = (s: string): number => Buffer.byteLength(s, 'utf8');

/**
 * The longest prefix of `s` that fits in `maxBytes` of UTF-8, cut between code points (never inside
 * a surrogate pair), and the rest.
 */
export function splitAtBytes(s: string, maxBytes: number): [string, string] {
  if (utf8Bytes(s) <= maxBytes) return [s, ''];
  let bytes = 0;
  let i = 0;
  for (const ch of s) {
    const b = utf8Bytes(ch);
    if (bytes + b > maxBytes) break;
    bytes += b;
    i += ch.length;
  }
  return [s.slice(0, i), s.slice(i)];
}

/**
 * Plan the writes for one incoming piece and the state after them. Agent text coalesces into the
 * open item of the same turn while it fits the item cap, continuing in new items when it does not;
 * every other kind closes the open item and is one item, its text cut to the item cap (meta
 * `truncated: true`). When the session's byte or item cap would be passed, the piece is dropped and
 * one `truncated` marker item is written instead (once: after it, everything is dropped).
 */
export function planTranscriptAppend(
  state: TranscriptState,
  input: TranscriptInput,
  caps: TranscriptCaps = DEFAULT_TRANSCRIPT_CAPS,
): { writes: TranscriptWrite[]; state: TranscriptState } {
  if (state.truncated) return { writes: [], state };
  const writes: TranscriptWrite[] = [];
  let s: TranscriptState = { ...state };
  const meta = input.meta ?? {};
  // The marker needs its own slot: it always fits the item cap, and it is counted against neither byte cap.
  const roomFor = (bytes: number, newItem: boolean) => s.bytes + bytes <= caps.sessionBytes && (!newItem || s.items + 1 < caps.sessionItems);
  const truncate = () => {
    writes.push({ op: 'created', seq: s.next_seq, turn_id: input.turn_id, role: 'system', kind: 'truncated', text: TRUNCATED_MARKER_TEXT, meta: {} });
    s = { ...s, next_seq: s.next_seq + 1, items: s.items + 1, truncated: true, open: null };
  };

  if (input.kind !== 'agent_text') {
    const [kept, rest] = splitAtBytes(input.text, caps.itemBytes);
    const bytes = utf8Bytes(kept);
    if (!roomFor(bytes, true)) {
      truncate();
      return { writes, state: s };
    }
    writes.push({
      op: 'created',
      seq: s.next_seq,
      turn_id: input.turn_id,
      role: input.role,
      kind: input.kind,
      text: kept,
      meta: rest ? { ...meta, truncated: true } : meta,
    });
    s = { ...s, next_seq: s.next_seq + 1, bytes: s.bytes + bytes, items: s.items + 1, open: null };
    return { writes, state: s };
  }

  let remaining = input.text;
  if (remaining === '') return { writes, state: s };
  while (remaining !== '') {
    const open = s.open && s.open.turn_id === input.turn_id && s.open.bytes < caps.itemBytes ? s.open : null;
    const room = caps.itemBytes - (open?.bytes ?? 0);
    const [piece, rest] = splitAtBytes(remaining, room);
    if (piece === '') {
      // Not even one code point fits the open item: close it and go on in a new one.
      s = { ...s, open: null };
      if (open) continue;
      // A code point larger than the whole item cap (a cap below 4 bytes): keep nothing of it.
      break;
    }
    const bytes = utf8Bytes(piece);
    if (!roomFor(bytes, !open)) {
      truncate();
      return { writes, state: s };
    }
    if (open) {
      writes.push({ op: 'appended', seq: open.seq, turn_id: input.turn_id, role: input.role, kind: 'agent_text', text: piece, meta });
      s = { ...s, bytes: s.bytes + bytes, open: { ...open, bytes: open.bytes + bytes } };
    } else {
      writes.push({ op: 'created', seq: s.next_seq, turn_id: input.turn_id, role: input.role, kind: 'agent_text', text: piece, meta });
      s = { ...s, next_seq: s.next_seq + 1, bytes: s.bytes + bytes, items: s.items + 1, open: { seq: s.next_seq, turn_id: input.turn_id, bytes } };
    }
    remaining = rest;
  }
  return { writes, state: s };
}

/** One event's piece of a run: its id (the inbox key) and what it adds. */
export interface TranscriptPiece {
  id: string;
  input: TranscriptInput;
}

/**
 * Merge consecutive writes to the same item into one: a chunk appended to the item just created is
 * part of its `created` text, chunks appended one after another are one `appended` chunk. What a
 * reader rebuilds from the result (created = the item's text, appended = text added to it) equals
 * what it rebuilds from the writes one by one; only the number of writes, and of pushes, changes.
 */
export function coalesceWrites(writes: readonly TranscriptWrite[]): TranscriptWrite[] {
  const out: TranscriptWrite[] = [];
  for (const w of writes) {
    const prev = out[out.length - 1];
    if (prev && w.op === 'appended' && prev.seq === w.seq) out[out.length - 1] = { ...prev, text: prev.text + w.text };
    else out.push(w);
  }
  return out;
}

/**
 * Plan a run of one session's pieces (consecutive events of one consumer batch, ADR 0035): exactly
 * what planning them one after another would write, coalesced. A piece whose id is not in `fresh`
 * (the inbox already held it: a redelivery) or repeats an id earlier in the run adds nothing, so
 * any split of a stream into runs, redeliveries included, ends in the same transcript and state.
 */
export function planTranscriptRun(
  state: TranscriptState,
  pieces: readonly TranscriptPiece[],
  fresh: ReadonlySet<string>,
  caps: TranscriptCaps = DEFAULT_TRANSCRIPT_CAPS,
): { writes: TranscriptWrite[]; state: TranscriptState } {
  const writes: TranscriptWrite[] = [];
  const used = new Set<string>();
  let s = state;
  for (const p of pieces) {
    if (!fresh.has(p.id) || used.has(p.id)) continue;
    used.add(p.id);
    const r = planTranscriptAppend(s, p.input, caps);
    writes.push(...r.writes);
    s = r.state;
  }
  return { writes: coalesceWrites(writes), state: s };
}
