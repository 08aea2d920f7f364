import { describe, expect, it } from 'vitest';
import { KandevError, type TranscriptItem } from '@kandev/contracts';
import { cutUtf8, fitConversationPage } from '../src/domain/conversation.js';
import { assertDepth, assertUnderLimit } from '../src/domain/limits.js';

const item = (seq: number, text: string): TranscriptItem => ({ seq, turn_id: null, role: 'agent', kind: 'agent_text', text, meta: {}, created_at: 't' });
const thrown = (fn: () => void) => {
  try {
    fn();
  } catch (e) {
    return e as KandevError;
  }
  return null;
};

describe('limits (R-11.2)', () => {
  it('refuses at the cap with CONFLICT naming the limit, its value and the count; 0 is no cap', () => {
    expect(thrown(() => assertUnderLimit('children_per_task', 99, 100, 'x'))).toBeNull();
    const e = thrown(() => assertUnderLimit('children_per_task', 100, 100, 'too many child tasks'))!;
    expect(e.code).toBe('CONFLICT');
    expect(e.details).toEqual({ limit: 'children_per_task', max: 100, current: 100 });
    expect(thrown(() => assertUnderLimit('live_sessions_per_workspace', 10_000, 0, 'x'))).toBeNull();
  });
  it('counts levels from the root: a task at level 10 of a 10-level cap gets no child', () => {
    expect(thrown(() => assertDepth(9, 10))).toBeNull();
    expect(thrown(() => assertDepth(10, 10))?.details).toEqual({ limit: 'tree_depth', max: 10, current: 10 });
    expect(thrown(() => assertDepth(50, 0))).toBeNull();
  });
});

describe('conversation pages', () => {
  it('cuts UTF-8 text at a character boundary', () => {
    expect(cutUtf8('héllo', 2)).toBe('h');
    expect(cutUtf8('héllo', 3)).toBe('hé');
    expect(cutUtf8('😀😀', 5)).toBe('😀');
    expect(cutUtf8('abc', 10)).toBe('abc');
  });
  it('fills a page up to its item and byte bounds, cuts a lone oversized item, and says where to go on', () => {
    const rows = [item(1, 'a'.repeat(40)), item(2, 'b'.repeat(40)), item(3, 'c'.repeat(40)), item(4, 'd')];
    expect(fitConversationPage(rows, 3, 100)).toMatchObject({ items: [{ seq: 1 }, { seq: 2 }], next_seq: 2 });
    expect(fitConversationPage(rows.slice(0, 2), 3, 1_000)).toMatchObject({ items: [{ seq: 1 }, { seq: 2 }], next_seq: null });
    const big = fitConversationPage([item(7, 'x'.repeat(500)), item(8, 'y')], 10, 100);
    expect(big.items).toEqual([{ seq: 7, role: 'agent', kind: 'agent_text', text: 'x'.repeat(100), created_at: 't', truncated: true }]);
    expect(big.next_seq).toBe(7);
    expect(fitConversationPage([], 10, 100)).toEqual({ items: [], next_seq: null });
  });
});
