import { describe, expect, it } from 'vitest';
import {
  coalesceWrites,
  EMPTY_TRANSCRIPT,
  planTranscriptAppend,
  planTranscriptRun,
  type TranscriptCaps,
  type TranscriptInput,
  type TranscriptPiece,
  type TranscriptState,
  type TranscriptWrite,
} from '../src/domain/transcript.js';

/*
 * The batched transcript consumer (ADR 0035) plans a run of one session's events at once. Its
 * contract, checked here over many random streams: for any split of a stream into runs, with any
 * redeliveries within or across runs, the items and the state are what planning each event once,
 * one after another, gives; and the pushes rebuild the same text.
 */

/** A small deterministic generator (mulberry32), so a failing case can be replayed from its seed. */
function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ALPHABET = ['a', 'b', 'c', 'é', '😀', ' ', '中'];

function randomStream(r: () => number, n: number): TranscriptPiece[] {
  let turn = 1;
  const out: TranscriptPiece[] = [];
  for (let i = 0; i < n; i++) {
    const x = r();
    if (x < 0.05) turn++;
    const len = Math.floor(r() * 8);
    const text = Array.from({ length: len }, () => ALPHABET[Math.floor(r() * ALPHABET.length)]).join('');
    const input: TranscriptInput =
      x < 0.1
        ? { turn_id: `t${turn}`, role: 'user', kind: 'prompt', text }
        : x < 0.15
          ? { turn_id: `t${turn}`, role: 'agent', kind: 'tool_call', text, meta: { tool_call_id: `c${i}` } }
          : { turn_id: `t${turn}`, role: 'agent', kind: 'agent_text', text };
    out.push({ id: `e${i}`, input });
  }
  return out;
}

/** What the store (and a console applying pushes) holds after the writes: item text and kind by seq. */
function apply(items: Map<number, { kind: string; text: string; meta: Record<string, unknown> }>, writes: readonly TranscriptWrite[]) {
  for (const w of writes) {
    if (w.op === 'created') {
      expect(items.has(w.seq)).toBe(false);
      items.set(w.seq, { kind: w.kind, text: w.text, meta: w.meta });
    } else {
      const it = items.get(w.seq);
      expect(it).toBeDefined();
      it!.text += w.text;
    }
  }
  return items;
}

/** The reference: each distinct event once, in order, one planTranscriptAppend at a time. */
function oneAtATime(stream: readonly TranscriptPiece[], caps: TranscriptCaps) {
  const seen = new Set<string>();
  let state: TranscriptState = EMPTY_TRANSCRIPT;
  const items = new Map();
  for (const p of stream) {
    if (seen.has(p.id)) continue;
    seen.add(p.id);
    const r = planTranscriptAppend(state, p.input, caps);
    apply(items, r.writes);
    state = r.state;
  }
  return { items, state };
}

/** Deliveries as the consumer sees them: the stream in order, some events delivered again later (a redelivery). */
function deliveries(r: () => number, stream: readonly TranscriptPiece[]): TranscriptPiece[] {
  const out: TranscriptPiece[] = [];
  for (const p of stream) {
    out.push(p);
    if (r() < 0.15) {
      const back = out[Math.floor(r() * out.length)]!;
      out.push(back);
    }
  }
  return out;
}

/** Split into runs at random, plan each with the inbox's view of what is new, and apply. */
function batched(r: () => number, delivered: readonly TranscriptPiece[], caps: TranscriptCaps, maxRun: number) {
  const inbox = new Set<string>();
  let state: TranscriptState = EMPTY_TRANSCRIPT;
  const items = new Map();
  let i = 0;
  let runs = 0;
  while (i < delivered.length) {
    const n = 1 + Math.floor(r() * maxRun);
    const run = delivered.slice(i, i + n);
    i += n;
    runs++;
    // recordOnce: the ids the inbox did not hold, each once.
    const fresh = new Set(run.map((p) => p.id).filter((id) => !inbox.has(id)));
    for (const id of fresh) inbox.add(id);
    const plan = planTranscriptRun(state, run, fresh, caps);
    // Coalesced: one write per item a run touches.
    expect(new Set(plan.writes.map((w) => w.seq)).size).toBe(plan.writes.length);
    apply(items, plan.writes);
    state = plan.state;
  }
  return { items, state, runs };
}

const CAPS: TranscriptCaps[] = [
  { itemBytes: 64 * 1024, sessionBytes: 5 * 1024 * 1024, sessionItems: 10_000 },
  { itemBytes: 10, sessionBytes: 1_000, sessionItems: 1_000 },
  { itemBytes: 9, sessionBytes: 120, sessionItems: 40 },
  { itemBytes: 16, sessionBytes: 400, sessionItems: 12 },
  { itemBytes: 4, sessionBytes: 60, sessionItems: 100 },
];

describe('batched transcript planning (ADR 0035)', () => {
  it('any split into runs, with redeliveries, gives the one-at-a-time transcript and state (caps included)', () => {
    let truncatedCases = 0;
    for (let seed = 1; seed <= 400; seed++) {
      const r = rng(seed);
      const caps = CAPS[seed % CAPS.length]!;
      const stream = randomStream(r, 5 + Math.floor(r() * 150));
      const expected = oneAtATime(stream, caps);
      const got = batched(r, deliveries(r, stream), caps, 1 + Math.floor(r() * 40));
      expect({ seed, items: [...got.items.entries()], state: got.state }).toEqual({ seed, items: [...expected.items.entries()], state: expected.state });
      if (expected.state.truncated) truncatedCases++;
    }
    // The cases reached the session caps often enough to mean something.
    expect(truncatedCases).toBeGreaterThan(50);
  });

  it('a run of one turn’s chunks is one write: created with the whole text, or appended to the open item', () => {
    const chunk = (id: string, text: string): TranscriptPiece => ({ id, input: { turn_id: 't', role: 'agent', kind: 'agent_text', text } });
    const first = planTranscriptRun(EMPTY_TRANSCRIPT, [chunk('a', 'hel'), chunk('b', 'lo'), chunk('c', ' world')], new Set(['a', 'b', 'c']));
    expect(first.writes.map((w) => [w.op, w.seq, w.text])).toEqual([['created', 1, 'hello world']]);
    const next = planTranscriptRun(first.state, [chunk('d', '!'), chunk('e', '!')], new Set(['d', 'e']));
    expect(next.writes.map((w) => [w.op, w.seq, w.text])).toEqual([['appended', 1, '!!']]);
  });

  it('ignores what the inbox held and repeats within the run', () => {
    const chunk = (id: string, text: string): TranscriptPiece => ({ id, input: { turn_id: 't', role: 'agent', kind: 'agent_text', text } });
    const r = planTranscriptRun(EMPTY_TRANSCRIPT, [chunk('a', 'x'), chunk('b', 'y'), chunk('a', 'x'), chunk('c', 'z')], new Set(['b', 'c']));
    expect(r.writes.map((w) => [w.op, w.text])).toEqual([['created', 'yz']]);
    expect(planTranscriptRun(EMPTY_TRANSCRIPT, [chunk('a', 'x')], new Set()).writes).toEqual([]);
  });

  it('a run crossing the session cap ends in one marker, and later runs add nothing', () => {
    const caps = { itemBytes: 10, sessionBytes: 25, sessionItems: 100 };
    const pieces = Array.from({ length: 10 }, (_, i): TranscriptPiece => ({
      id: `e${i}`,
      input: { turn_id: 't', role: 'agent', kind: 'agent_text', text: 'abcd' },
    }));
    const r = planTranscriptRun(EMPTY_TRANSCRIPT, pieces, new Set(pieces.map((p) => p.id)), caps);
    expect(r.writes.map((w) => [w.op, w.seq, w.kind, w.text.length])).toEqual([
      ['created', 1, 'agent_text', 10],
      ['created', 2, 'agent_text', 10],
      ['created', 3, 'agent_text', 4],
      ['created', 4, 'truncated', expect.any(Number)],
    ]);
    expect(r.state.truncated).toBe(true);
    const more = { id: 'late', input: pieces[0]!.input };
    expect(planTranscriptRun(r.state, [more], new Set(['late']), caps).writes).toEqual([]);
  });

  it('coalesceWrites leaves writes to different items alone', () => {
    const w = (op: 'created' | 'appended', seq: number, text: string): TranscriptWrite => ({
      op,
      seq,
      turn_id: 't',
      role: 'agent',
      kind: 'agent_text',
      text,
      meta: {},
    });
    expect(
      coalesceWrites([w('appended', 1, 'a'), w('created', 2, 'b'), w('appended', 2, 'c'), w('created', 3, 'd')]).map((x) => [x.op, x.seq, x.text]),
    ).toEqual([
      ['appended', 1, 'a'],
      ['created', 2, 'bc'],
      ['created', 3, 'd'],
    ]);
  });
});
