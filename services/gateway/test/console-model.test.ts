import { describe, expect, it } from 'vitest';
import {
  applyPush,
  backoffMs,
  expiryWords,
  kindWords,
  columnOf,
  COLUMNS,
  flattenTree,
  formatCost,
  hasGap,
  holdBadge,
  mergeMessages,
  needsAttention,
  pendingBySubtree,
  plainWords,
  tokenUsable,
  visibleWindow,
  type TreeNodeState,
} from '../console/src/model.js';
import type { TaskListItem, TaskStatus, TranscriptItem } from '@kandev/contracts';

const task = (id: string, parent_id: string | null = null): TaskListItem => ({
  id,
  workspace_id: 'w',
  parent_id,
  title: id,
  status: 'TODO',
  office: false,
  agent: null,
  archived_at: null,
  cancelled_at: null,
  created_at: '',
  updated_at: '',
  child_count: 0,
  active_session_count: 0,
  hold: null,
});
const msg = (seq: number, text = `m${seq}`): TranscriptItem => ({ seq, turn_id: null, role: 'agent', kind: 'agent_text', text, created_at: '' });

describe('console model', () => {
  it('puts every task status in exactly one board column', () => {
    const all: TaskStatus[] = ['TODO', 'SCHEDULING', 'IN_PROGRESS', 'REVIEW', 'BLOCKED', 'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED'];
    for (const s of all) expect(COLUMNS.filter((c) => c.statuses.includes(s))).toHaveLength(1);
    expect(columnOf('SCHEDULING')).toBe('todo');
    expect(columnOf('CANCELLED')).toBe('stopped');
  });

  it('names the hold badges as the seeds do', () => {
    expect(holdBadge({ mode: 'pause' })).toBe('Paused');
    expect(holdBadge({ mode: 'cancel' })).toBe('Cancelled (tree)');
    expect(holdBadge(null)).toBeNull();
  });

  it('turns API errors into plain words, and says when a route is missing rather than a thing', () => {
    expect(
      plainWords(
        404,
        'NOT_FOUND',
        'no route GET /tasks/0b6f1c1e-3c8f-4f5e-9a55-0c2a5b1d9e11/permissions',
        '/tasks/0b6f1c1e-3c8f-4f5e-9a55-0c2a5b1d9e11/permissions',
      ),
    ).toBe('This gateway does not offer /tasks/:id/permissions yet (404), so this part of the console is unavailable.');
    expect(plainWords(404, 'NOT_FOUND', 'task not found', '/tasks/x')).toBe('Not found: task not found.');
    expect(plainWords(409, 'CONFLICT', 'no active pause hold', '/tasks/x/tree/resume')).toBe('This cannot be done in the current state: no active pause hold.');
    expect(plainWords(401, 'UNAUTHORIZED', 'missing token', '/tasks')).toMatch(/Sign in again/);
    expect(plainWords(0, 'NETWORK', 'network error', '/tasks')).toMatch(/Cannot reach the gateway/);
    expect(plainWords(418, 'TEAPOT', 'short and stout', '/x')).toBe('The request failed (418 TEAPOT): short and stout.');
  });

  it('formats the cost in US dollars, keeping sub-cent totals visible', () => {
    expect(formatCost(4200)).toBe('$42.00');
    expect(formatCost(0)).toBe('$0.00');
    expect(formatCost(0.0375)).toBe('$0.0004');
    expect(formatCost(123456)).toBe('$1,234.56');
  });

  it('backs off exponentially up to 15 s with bounded jitter', () => {
    expect(backoffMs(0, 0)).toBe(500);
    expect(backoffMs(3, 0)).toBe(4000);
    expect(backoffMs(20, 0)).toBe(15_000);
    expect(backoffMs(20, 1)).toBe(10_500);
  });

  it('merges transcript pages and pushes by seq and detects holes', () => {
    const have = [msg(1), msg(2)];
    expect(mergeMessages(have, [msg(2, 'again'), msg(3)]).map((m) => [m.seq, m.text])).toEqual([
      [1, 'm1'],
      [2, 'again'],
      [3, 'm3'],
    ]);
    expect(hasGap(have, msg(3))).toBe(false);
    expect(hasGap(have, msg(5))).toBe(true);
    expect(hasGap([], msg(7))).toBe(false); // nothing held yet: the first page is being read
  });

  it('flattens only expanded nodes, depth first, with a load-more row for paged children', () => {
    const tasks = new Map(['r', 'a', 'b', 'a1'].map((id) => [id, task(id)]));
    const nodes = new Map<string, TreeNodeState>([
      ['r', { children: ['a', 'b'], cursor: 'next', loaded: true, loading: false }],
      ['a', { children: ['a1'], cursor: null, loaded: true, loading: false }],
    ]);
    const rows = flattenTree('r', tasks, nodes, new Set(['r', 'a']));
    expect(rows.map((r) => (r.kind === 'task' ? `${r.task.id}@${r.depth}` : `more:${r.parentId}@${r.depth}`))).toEqual([
      'r@0',
      'a@1',
      'a1@2',
      'b@1',
      'more:r@1',
    ]);
    expect(flattenTree('r', tasks, nodes, new Set(['r'])).map((r) => (r.kind === 'task' ? r.task.id : 'more'))).toEqual(['r', 'a', 'b', 'more']);
  });

  it('renders a window of rows around the viewport, not the whole list', () => {
    expect(visibleWindow(2000, 32, 0, 640)).toEqual({ start: 0, end: 28 });
    expect(visibleWindow(2000, 32, 32_000, 640)).toEqual({ start: 992, end: 1028 });
    expect(visibleWindow(10, 32, 0, 640)).toEqual({ start: 0, end: 10 });
  });

  it('applies session.message pushes: created replaces by seq, appended extends the held item', () => {
    const have = [msg(1, 'hello'), msg(2, 'wor')];
    expect(applyPush(have, { ...msg(2, 'ld'), op: 'appended' })!.map((m) => m.text)).toEqual(['hello', 'world']);
    expect(applyPush(have, { ...msg(3, 'new'), op: 'created' })!.map((m) => m.seq)).toEqual([1, 2, 3]);
    expect(applyPush(have, { ...msg(4, 'lost chunk'), op: 'appended' })).toBeNull();
    // With the item's size before the chunk (UTF-8 bytes): a chunk already held changes nothing, a missed one asks for a read.
    const streamed = [msg(1, 'hello'), msg(2, 'wör')]; // 'wör' is 4 bytes
    expect(applyPush(streamed, { ...msg(2, 'ld'), op: 'appended', offset: 4 })!.map((m) => m.text)).toEqual(['hello', 'wörld']);
    expect(applyPush(streamed, { ...msg(2, 'ör'), op: 'appended', offset: 1 })).toBe(streamed); // a page read after it already has it
    expect(applyPush(streamed, { ...msg(2, 'ld'), op: 'appended', offset: 6 })).toBeNull(); // a chunk before it was missed
    // A page read before chunks the console applied does not take them back; a newer one replaces.
    expect(mergeMessages([msg(2, 'world')], [msg(2, 'wor')]).map((m) => m.text)).toEqual(['world']);
    expect(mergeMessages([msg(2, 'wor')], [msg(2, 'world')]).map((m) => m.text)).toEqual(['world']);
    expect(kindWords('agent', 'agent_text')).toBe('agent');
    expect(kindWords('agent', 'tool_call')).toBe('agent · tool call');
  });
});

describe('needsAttention', () => {
  it('flags an IN_PROGRESS task with no live session, and nothing else', () => {
    expect(needsAttention('IN_PROGRESS', false)).toBe(true);
    expect(needsAttention('IN_PROGRESS', true)).toBe(false);
    for (const status of ['TODO', 'REVIEW', 'COMPLETED', 'CANCELLED', 'WAITING_FOR_INPUT'] as TaskStatus[]) expect(needsAttention(status, false)).toBe(false);
  });
});

describe('pendingBySubtree', () => {
  it('counts an item for its task and every ancestor, and each item once per task', () => {
    const counts = pendingBySubtree([
      { task_id: 'grandchild', ancestor_ids: ['root', 'child'] },
      { task_id: 'child', ancestor_ids: ['root'] },
      { task_id: 'other', ancestor_ids: [] },
      // A malformed ancestor list naming the task itself does not count it twice.
      { task_id: 'twice', ancestor_ids: ['twice'] },
    ]);
    expect(Object.fromEntries(counts)).toEqual({ root: 2, child: 2, grandchild: 1, other: 1, twice: 1 });
    expect(pendingBySubtree([]).size).toBe(0);
  });
});

describe('expiryWords', () => {
  const now = Date.parse('2026-12-07T12:00:00Z');
  const at = (ms: number) => new Date(now + ms).toISOString();
  it('counts seconds down under two minutes, minutes under an hour, and says when it expired', () => {
    expect(expiryWords(at(50_000), now)).toEqual({ words: 'expires in 50 s', soon: false, expired: false });
    expect(expiryWords(at(14_200), now)).toEqual({ words: 'expires in 15 s', soon: false, expired: false });
    expect(expiryWords(at(9_000), now)).toEqual({ words: 'expires in 9 s', soon: true, expired: false });
    expect(expiryWords(at(600_000), now)).toMatchObject({ words: 'expires in 10 min', soon: false });
    expect(expiryWords(at(0), now)).toEqual({ words: 'expired', soon: true, expired: true });
    expect(expiryWords(at(-5_000), now).expired).toBe(true);
    expect(expiryWords(at(2 * 3600_000), now).words).toMatch(/^expires at \d/);
    expect(expiryWords('not a time', now).words).toBe('');
  });
});

describe('tokenUsable', () => {
  const jwt = (claims: unknown) => `h.${btoa(JSON.stringify(claims)).replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_')}.s`;
  it('keeps an offered token only while its exp is ahead, and refuses what it cannot read', () => {
    const now = Date.parse('2026-12-07T12:00:00Z');
    expect(tokenUsable(jwt({ sub: 'op', exp: now / 1000 + 60 }), now)).toBe(true);
    expect(tokenUsable(jwt({ sub: 'op', exp: now / 1000 - 1 }), now)).toBe(false);
    expect(tokenUsable(jwt({ sub: 'op' }), now)).toBe(true);
    expect(tokenUsable(jwt({ exp: 'later' }), now)).toBe(false);
    expect(tokenUsable(jwt('a string'), now)).toBe(false);
    expect(tokenUsable('not-a-jwt', now)).toBe(false);
    expect(tokenUsable('h.@@@.s', now)).toBe(false);
  });
});
