import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Orch } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { operator, startHarness, type Harness } from './harness.js';

/**
 * ADR 0001, 0033 and 0034: a stop's transaction sends BEGIN, its deadline (ADR 0034), then the fence bump, then the session locks,
 * ..., then COMMIT, in that order on one connection; a cancel sends BEGIN, then the session's
 * guard, the queue pause before the state write, ..., COMMIT. Recorded from postgres.js's `debug`
 * hook on the orchestrator's own pool, which sees each statement as it is written to its connection.
 */
interface Sent {
  conn: number;
  query: string;
  params: unknown[];
}

describe('statement order of the control transactions', () => {
  let h: Harness;
  const sent: Sent[] = [];
  beforeAll(async () => {
    h = await startHarness({}, { dbDebug: (conn, query, params) => void sent.push({ conn, query: query.replace(/\s+/g, ' ').trim(), params }) });
  });
  afterAll(async () => h?.stop());

  /** The statements of the transaction on the connection that sent `anchor` (BEGIN before it to COMMIT after it), labelled. */
  function transactionAround(anchor: (s: Sent) => boolean): string[] {
    const at = sent.findIndex(anchor);
    expect(at, 'the anchor statement was sent').toBeGreaterThanOrEqual(0);
    const conn = sent[at]!.conn;
    const mine = sent.map((s, i) => ({ ...s, i })).filter((s) => s.conn === conn);
    const pos = mine.findIndex((s) => s.i === at);
    let begin = pos;
    // Back to this transaction's BEGIN: meeting another's end first means the anchor went out before BEGIN.
    while (begin >= 0 && !/^begin\b/i.test(mine[begin]!.query)) {
      expect(mine[begin]!.query, 'no statement of the transaction goes out before its BEGIN').not.toMatch(/^(commit|rollback)\b/i);
      begin--;
    }
    let commit = pos;
    while (commit < mine.length && !/^commit\b/i.test(mine[commit]!.query)) commit++;
    expect(begin, 'BEGIN before the anchor').toBeGreaterThanOrEqual(0);
    expect(commit, 'COMMIT after the anchor').toBeLessThan(mine.length);
    return mine.slice(begin, commit + 1).map((s) => label(s.query));
  }

  const label = (q: string): string =>
    /^begin\b/i.test(q)
      ? 'BEGIN'
      : /^commit\b/i.test(q)
        ? 'COMMIT'
        : /set_config\('lock_timeout'/.test(q)
          ? 'deadline'
          : /^UPDATE tasks .*fence_epoch = .*fence_epoch \+ 1/.test(q)
            ? 'fence bump'
            : /FROM sessions .*FOR NO KEY UPDATE/.test(q)
              ? 'session lock'
              : /^UPDATE sessions SET state = 'CANCELLED'/.test(q)
                ? 'sessions cancelled'
                : /^UPDATE sessions SET queue_paused/.test(q)
                  ? 'queue paused'
                  : /^UPDATE sessions SET state = \$\d+,/.test(q)
                    ? 'session state'
                    : /^UPDATE tasks SET .*status = /.test(q)
                      ? 'review'
                      : /^INSERT INTO audit_log/.test(q)
                        ? 'audit'
                        : /^INSERT INTO outbox/.test(q)
                          ? 'outbox'
                          : 'other';

  /** `expected` occur in `order` in this order (other statements may sit between them). */
  const inOrder = (order: string[], expected: string[]) => {
    const positions = expected.map((e) => order.indexOf(e));
    expect(
      positions.every((p) => p >= 0),
      `all of ${expected.join(', ')} in ${order.join(', ')}`,
    ).toBe(true);
    expect(
      [...positions].sort((a, b) => a - b),
      order.join(' → '),
    ).toEqual(positions);
  };

  it('a child stop: BEGIN → fence bump → session lock → writes → review → outbox → COMMIT', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    await h.startSession(child.id, 'work');
    sent.length = 0;
    expect(await h.stopChild(parent.id, child.id)).toEqual({ task_id: child.id, status: 'stopped' });
    const order = transactionAround((s) => label(s.query) === 'fence bump' && s.params.includes(child.id));
    expect(order.slice(0, 4)).toEqual(['BEGIN', 'deadline', 'fence bump', 'session lock']);
    inOrder(order, ['BEGIN', 'fence bump', 'session lock', 'sessions cancelled', 'review', 'outbox', 'COMMIT']);
    expect(order.at(-1)).toBe('COMMIT');
  });

  it('a task stop: BEGIN → fence bump → session lock → writes → review → outbox → COMMIT', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 'task');
    await h.startSession(task.id, 'work');
    sent.length = 0;
    await request(h.nc, Orch.taskStop, { actor: operator, task_id: task.id });
    const order = transactionAround((s) => label(s.query) === 'fence bump' && s.params.includes(task.id));
    expect(order.slice(0, 4)).toEqual(['BEGIN', 'deadline', 'fence bump', 'session lock']);
    inOrder(order, ['BEGIN', 'fence bump', 'session lock', 'sessions cancelled', 'review', 'outbox', 'COMMIT']);
  });

  it('a turn cancel: BEGIN → session lock → queue paused → session state → outbox → COMMIT', async () => {
    const ws = await h.workspace();
    const task = await h.task(ws.id, 't');
    const s = await h.startSession(task.id, 'sleep');
    sent.length = 0;
    await request(h.nc, Orch.agentCancel, { actor: operator, session_id: s.id });
    const order = transactionAround((x) => label(x.query) === 'queue paused' && x.params.includes(s.id));
    expect(order.slice(0, 3)).toEqual(['BEGIN', 'deadline', 'session lock']);
    inOrder(order, ['BEGIN', 'session lock', 'queue paused', 'session state', 'outbox', 'COMMIT']);
  });
});
