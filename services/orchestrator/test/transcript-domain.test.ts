import { describe, expect, it } from 'vitest';
import { containsPattern, decodeCursor, encodeCursor, pageOf, pageSize } from '../src/domain/paging.js';
import { EMPTY_TRANSCRIPT, planTranscriptAppend, splitAtBytes, utf8Bytes, type TranscriptInput, type TranscriptState } from '../src/domain/transcript.js';

const caps = { itemBytes: 10, sessionBytes: 30, sessionItems: 6 };
const text = (t: string, turn = 't1'): TranscriptInput => ({ turn_id: turn, role: 'agent', kind: 'agent_text', text: t });
const prompt = (t: string, turn = 't1'): TranscriptInput => ({ turn_id: turn, role: 'user', kind: 'prompt', text: t });

/** Apply inputs one after another; every write and the final state. */
function run(inputs: TranscriptInput[], state: TranscriptState = EMPTY_TRANSCRIPT) {
  const writes = [];
  for (const i of inputs) {
    const r = planTranscriptAppend(state, i, caps);
    writes.push(...r.writes);
    state = r.state;
  }
  return { writes: writes.map((w) => [w.op, w.seq, w.kind, w.text]), state };
}

describe('transcript coalescing (R-8.2)', () => {
  it('appends chunks of one turn to the open item; another kind or another turn starts a new one', () => {
    expect(run([text('ab'), text('cd'), prompt('p', 't2'), text('ef', 't2'), text('gh', 't3')]).writes).toEqual([
      ['created', 1, 'agent_text', 'ab'],
      ['appended', 1, 'agent_text', 'cd'],
      ['created', 2, 'prompt', 'p'],
      ['created', 3, 'agent_text', 'ef'],
      ['created', 4, 'agent_text', 'gh'],
    ]);
  });
  it('continues text past the item cap in a new item, and never splits a code point', () => {
    expect(run([text('12345678'), text('abcdef')]).writes).toEqual([
      ['created', 1, 'agent_text', '12345678'],
      ['appended', 1, 'agent_text', 'ab'],
      ['created', 2, 'agent_text', 'cdef'],
    ]);
    const emoji = '😀😀😀'; // 4 bytes each
    const { writes } = run([text(emoji)]);
    expect(writes).toEqual([
      ['created', 1, 'agent_text', '😀😀'],
      ['created', 2, 'agent_text', '😀'],
    ]);
  });
  it('cuts any other item to the cap and says so', () => {
    const r = planTranscriptAppend(EMPTY_TRANSCRIPT, prompt('x'.repeat(25)), caps);
    expect(r.writes[0]).toMatchObject({ op: 'created', text: 'x'.repeat(10), meta: { truncated: true } });
  });
  it('past the session byte cap: one truncated marker, then nothing', () => {
    const { writes, state } = run([text('a'.repeat(10)), prompt('b'.repeat(10)), text('c'.repeat(10)), text('d'), prompt('e'), text('f')]);
    expect(writes).toEqual([
      ['created', 1, 'agent_text', 'a'.repeat(10)],
      ['created', 2, 'prompt', 'b'.repeat(10)],
      ['created', 3, 'agent_text', 'c'.repeat(10)],
      ['created', 4, 'truncated', expect.any(String)],
    ]);
    expect(state).toMatchObject({ truncated: true, bytes: 30, items: 4, next_seq: 5 });
  });
  it('past the session item cap: the marker is the last item', () => {
    const inputs = Array.from({ length: 10 }, (_, i) => prompt(String(i)));
    const { writes, state } = run(inputs);
    expect(writes).toHaveLength(6);
    expect(writes.at(-1)![2]).toBe('truncated');
    expect(state.items).toBe(6);
  });
  it('empty text adds nothing', () => {
    expect(run([text('')]).writes).toEqual([]);
  });
  it('splitAtBytes measures UTF-8', () => {
    expect(splitAtBytes('héllo', 3)).toEqual(['hé', 'llo']);
    expect(utf8Bytes('hé')).toBe(3);
  });
});

describe('keyset paging (R-8.1)', () => {
  it('round-trips a cursor and refuses anything else', () => {
    const k = { ts: '2026-12-03 09:30:01.123456+00', id: '0b7c7d3e-4a3b-4b8e-9a0e-1c2d3e4f5a6b' };
    expect(decodeCursor(encodeCursor(k))).toEqual(k);
    for (const bad of ['', 'x', encodeCursor({ ts: 'now()', id: k.id }), encodeCursor({ ts: k.ts, id: 'x' })])
      expect(() => decodeCursor(bad)).toThrow(/invalid cursor/);
  });
  it('pages with one row more than the limit', () => {
    const rows = [1, 2, 3].map((i) => ({ id: `00000000-0000-4000-8000-00000000000${i}`, sort_ts: `2026-01-01 00:00:0${i}+00` }));
    expect(pageOf(rows, 3)).toEqual({ rows, next_cursor: null });
    const p = pageOf(rows, 2);
    expect(p.rows).toHaveLength(2);
    expect(decodeCursor(p.next_cursor!)).toEqual({ ts: rows[1]!.sort_ts, id: rows[1]!.id });
  });
  it('clamps the page size and escapes LIKE wildcards', () => {
    expect(pageSize(undefined, { default: 50, max: 200 })).toBe(50);
    expect(pageSize(1_000, { default: 50, max: 200 })).toBe(200);
    expect(containsPattern('100%_a\\b')).toBe('%100\\%\\_a\\\\b%');
  });
});
