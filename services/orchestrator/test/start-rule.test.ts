import { describe, expect, it } from 'vitest';
import type { SessionState, TaskStatus } from '@kandev/contracts';
import { earlyRefusal, sessionStartVerdict, wakeupSkipReason, type LiveSessionPolicy } from '../src/domain/start.js';

/** The one start rule (R-10.1, B-1, ADR 0060) as a plain function: every path that starts a session asks it. */
const task = (status: TaskStatus = 'TODO', archived = false) => ({ status, archived_at: archived ? '2026-12-07T00:00:00Z' : null });
const session = (id: string, state: SessionState) => ({ id, state });
const verdict = (
  facts: Partial<Parameters<typeof sessionStartVerdict>[0]> & { live?: Array<{ id: string; state: SessionState }> },
  policy: LiveSessionPolicy = 'another',
) => sessionStartVerdict({ task: task(), hold: null, live: [], ...facts }, policy);

describe('may this task get a session now?', () => {
  it('starts an idle task, whatever the path', () => {
    for (const p of ['join', 'refuse', 'another'] as const) expect(verdict({}, p)).toEqual({ kind: 'start' });
    for (const status of ['TODO', 'IN_PROGRESS', 'REVIEW', 'COMPLETED'] as const) expect(verdict({ task: task(status) }).kind).toBe('start');
  });

  it('refuses a CANCELLED task on every path, with task_cancelled (R-10.1)', () => {
    for (const p of ['join', 'refuse', 'another'] as const) {
      const v = verdict({ task: task('CANCELLED'), live: [session('s1', 'WAITING_FOR_INPUT')] }, p);
      expect(v).toMatchObject({ kind: 'refuse', reason: 'task_cancelled', details: { reason: 'task_cancelled' } });
    }
  });

  it("names the hold for a held task, before its CANCELLED status: a tree cancel's members say tree_cancelled (R-4.3)", () => {
    const hold = { hold_id: 'h1', mode: 'cancel' as const };
    expect(verdict({ task: task('CANCELLED'), hold })).toMatchObject({
      kind: 'refuse',
      reason: 'tree_cancelled',
      details: { hold_id: 'h1', hold_mode: 'cancel', reason: 'tree_cancelled' },
    });
    expect(verdict({ hold: { hold_id: 'h2', mode: 'pause' } })).toMatchObject({ kind: 'refuse', reason: 'tree_paused', details: { hold_mode: 'pause' } });
  });

  it('refuses an archived task first', () => {
    expect(verdict({ task: task('CANCELLED', true), hold: { hold_id: 'h', mode: 'pause' } })).toMatchObject({ reason: 'task_archived' });
  });

  it('joins a start in flight on every path but spawn, which it refuses: at most one start per task', () => {
    const starting = session('s2', 'STARTING');
    for (const p of ['join', 'another'] as const)
      expect(verdict({ live: [session('s1', 'WAITING_FOR_INPUT'), starting] }, p)).toEqual({ kind: 'join', session: starting });
    // a child with a live session, one being started included, is CONFLICT to a spawn.
    expect(verdict({ live: [starting] }, 'refuse')).toMatchObject({ kind: 'refuse', reason: 'session_live', details: { session_id: 's2' } });
  });

  it('with a live session: a wakeup joins the newest, a spawn is refused, an operator start opens another', () => {
    const live = [session('s1', 'RUNNING'), session('s2', 'WAITING_FOR_INPUT')];
    expect(verdict({ live }, 'join')).toEqual({ kind: 'join', session: live[1] });
    expect(verdict({ live }, 'refuse')).toMatchObject({ kind: 'refuse', reason: 'session_live', details: { session_id: 's2' } });
    expect(verdict({ live }, 'another')).toEqual({ kind: 'start' });
  });

  it('refuses early, before the lock, by the same rule on unlocked reads; never joins there', () => {
    expect(earlyRefusal({ task: task('CANCELLED'), hold: null })).toMatchObject({ reason: 'task_cancelled' });
    expect(earlyRefusal({ task: task('CANCELLED'), hold: { hold_id: 'h', mode: 'cancel' } })).toMatchObject({ reason: 'tree_cancelled' });
    expect(earlyRefusal({ task: task('TODO', true), hold: null })).toMatchObject({ reason: 'task_archived', message: 'task is archived' });
    expect(earlyRefusal({ task: task('IN_PROGRESS'), hold: null })).toBeNull();
  });

  it("names a refused wakeup's skip reason: the rule's own, the live-session cap's, else none", () => {
    expect(wakeupSkipReason({ reason: 'tree_paused', hold_id: 'h', hold_mode: 'pause' })).toBe('tree_paused');
    expect(wakeupSkipReason({ limit: 'live_sessions_per_workspace', max: 3, current: 3 })).toBe('live_session_limit');
    expect(wakeupSkipReason({ limit: 'children_per_task', max: 3, current: 3 })).toBeUndefined();
    expect(wakeupSkipReason(undefined)).toBeUndefined();
  });
});
