import { describe, expect, it } from 'vitest';
import type { Execution } from '@kandev/contracts';
import { assertDirectParent } from '../src/domain/access.js';
import { assertQueueHasRoom, EVENT_PROMPT_PREVIEW, queueEventMessage } from '../src/domain/messages.js';
import { decideStops, decisionStops, livenessOf, planChildStop, planIsEmpty, planTaskStop, planTreeStop } from '../src/domain/stop.js';
import { holdMembersOf, releaseConflict } from '../src/domain/tree.js';
import {
  mayMoveToReview,
  sessionStateAfterExecutionEnd,
  statusAfterFailedLaunch,
  statusOfStalledTask,
  turnEndAfterExecutionEnd,
} from '../src/domain/transitions.js';

const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const exec = (n: number, session: number, status: Execution['status'] = 'RUNNING'): Execution => ({
  execution_id: id(100 + n),
  session_id: id(session),
  task_id: id(1),
  workspace_id: id(9),
  instance_id: 'i',
  protocol: 'acp',
  agent: 'a',
  pid: n,
  agentctl_pid: null,
  agentctl_url: null,
  status,
  turn_id: null,
  fence_epoch: 0,
  started_at: '',
  updated_at: '',
});

describe('direct-parent rule', () => {
  const ws = id(9);
  const parent = { id: id(2), workspace_id: ws, parent_id: null };
  const child = { id: id(3), workspace_id: ws, parent_id: parent.id };
  it('allows only the direct parent in the same workspace', () => {
    expect(() => assertDirectParent(parent, child)).not.toThrow();
    expect(() => assertDirectParent(child, child)).toThrow(/direct parent/);
    expect(() => assertDirectParent(child, parent)).toThrow(/direct parent/);
    expect(() => assertDirectParent({ ...parent, workspace_id: id(8) }, child)).toThrow(/another workspace/);
  });
});

describe('REVIEW guard', () => {
  const task = { status: 'IN_PROGRESS' as const, archived_at: null, office: false };
  it('moves only active, unarchived, non-office tasks with no other working session', () => {
    expect(mayMoveToReview(task, ['CANCELLED'])).toBe(true);
    expect(mayMoveToReview({ ...task, status: 'SCHEDULING' }, [])).toBe(true);
    expect(mayMoveToReview({ ...task, status: 'COMPLETED' }, [])).toBe(false);
    expect(mayMoveToReview({ ...task, archived_at: 'x' }, [])).toBe(false);
    expect(mayMoveToReview({ ...task, office: true }, [])).toBe(false);
    expect(mayMoveToReview(task, ['CANCELLED', 'RUNNING'])).toBe(false);
    expect(mayMoveToReview(task, ['WAITING_FOR_INPUT'])).toBe(true);
  });
});

describe('task stop plan', () => {
  it('unions active sessions with every registered execution, orphans included', () => {
    const plan = planTaskStop(
      [
        { id: id(11), state: 'RUNNING', execution_id: id(101), instance_id: 'i' },
        { id: id(12), state: 'STARTING', execution_id: null, instance_id: null },
      ],
      [exec(1, 11), exec(2, 13, 'READY'), exec(3, 14, 'STOPPED')],
    );
    const e1 = exec(1, 11);
    expect(plan.cancel).toEqual([
      { session_id: id(11), execution: { execution_id: e1.execution_id, session_id: e1.session_id, instance_id: e1.instance_id, listed: true } },
      { session_id: id(12), execution: null },
    ]);
    expect(plan.halt.map((o) => o.execution_id)).toEqual([id(102)]);
    expect(plan.reason).toBe('stopped_by_operator');
  });
  it('tears down at the owner its row names an active session whose registry entry is missing (it may have lapsed while the process lives)', () => {
    const plan = planTaskStop([{ id: id(11), state: 'RUNNING', execution_id: id(101), instance_id: 'life-2' }], []);
    expect(plan.cancel).toEqual([{ session_id: id(11), execution: { execution_id: id(101), session_id: id(11), instance_id: 'life-2', listed: false } }]);
    // A row that names no owner has nowhere to send it.
    expect(planTaskStop([{ id: id(11), state: 'RUNNING', execution_id: id(101), instance_id: null }], []).cancel).toEqual([
      { session_id: id(11), execution: null },
    ]);
  });
  it('classifies a session whose execution is gone as not live', () => {
    expect(livenessOf({ id: id(11), state: 'RUNNING', execution_id: id(101), instance_id: 'i' }, []).kind).toBe('gone');
    expect(livenessOf({ id: id(11), state: 'STARTING', execution_id: null, instance_id: null }, []).kind).toBe('launching');
    expect(livenessOf({ id: id(11), state: 'FAILED', execution_id: id(101), instance_id: 'i' }, [exec(1, 11)]).kind).toBe('inactive');
  });
  it("never captures an execution other than the session's own", () => {
    const l = livenessOf({ id: id(11), state: 'RUNNING', execution_id: id(101), instance_id: 'i' }, [exec(2, 11)]);
    expect(l.kind).toBe('gone');
  });
});

describe('child stop plan', () => {
  it('cancels live and launching candidates, reconciles gone ones (sweeping the execution their row names at its owner), halts nothing', () => {
    const plan = planChildStop(
      [
        { id: id(11), state: 'RUNNING', execution_id: id(101), instance_id: 'i' },
        { id: id(12), state: 'STARTING', execution_id: null, instance_id: null },
        { id: id(13), state: 'RUNNING', execution_id: id(103), instance_id: 'life-3' },
        { id: id(14), state: 'COMPLETED', execution_id: id(104), instance_id: 'i' },
      ],
      [exec(1, 11), exec(4, 14)],
    );
    expect(plan.reason).toBe('stopped_by_parent_task');
    expect(plan.cancel.map((c) => [c.session_id, c.execution?.execution_id ?? null])).toEqual([
      [id(11), id(101)],
      [id(12), null],
    ]);
    expect(plan.gone).toEqual([{ session_id: id(13), execution: { execution_id: id(103), session_id: id(13), instance_id: 'life-3', listed: false } }]);
    expect(plan.halt).toEqual([]);
    expect(planIsEmpty(planChildStop([], []))).toBe(true);
  });
});

describe('stop decision under the locks', () => {
  const captured = (n: number, session: number, listed = true) => ({ execution_id: id(100 + n), session_id: id(session), instance_id: 'i', listed });
  it('cancels what is still active with its captured execution, skips what a concurrent path ended or relaunched, keeps orphans to halt', () => {
    const decision = decideStops(
      {
        reason: 'stopped_by_operator',
        cancel: [
          { session_id: id(11), execution: captured(1, 11) },
          { session_id: id(12), execution: null },
          { session_id: id(13), execution: captured(3, 13) },
          { session_id: id(14), execution: captured(4, 14) },
          { session_id: id(15), execution: captured(5, 15) },
        ],
        halt: [captured(6, 16)],
        gone: [
          { session_id: id(17), execution: captured(7, 17, false) },
          { session_id: id(18), execution: captured(8, 18, false) },
          { session_id: id(19), execution: captured(9, 19, false) },
          { session_id: id(20), execution: null },
        ],
      },
      [
        { id: id(11), state: 'RUNNING', execution_id: id(101), instance_id: 'i' },
        { id: id(12), state: 'STARTING', execution_id: null, instance_id: null },
        // Ended by a concurrent path before the lock.
        { id: id(13), state: 'COMPLETED', execution_id: id(103), instance_id: 'i' },
        // Holds another execution than the one captured.
        { id: id(14), state: 'RUNNING', execution_id: id(199), instance_id: 'i' },
        // id(15) is not among the locked rows (no longer active).
        { id: id(17), state: 'RUNNING', execution_id: id(107), instance_id: 'i' },
        { id: id(18), state: 'FAILED', execution_id: id(108), instance_id: 'i' },
        // Relaunched since it was read: the replacement is not this stop's.
        { id: id(19), state: 'RUNNING', execution_id: id(198), instance_id: 'i' },
        { id: id(20), state: 'RUNNING', execution_id: id(110), instance_id: null },
      ],
    );
    expect(decision.cancel).toEqual([id(11), id(12)]);
    expect(decision.gone).toEqual([id(17), id(20)]);
    expect(decision.teardowns).toEqual([
      { execution: captured(1, 11), orphaned: false },
      { execution: captured(6, 16), orphaned: true },
      // The gone session's execution, swept at the owner its row names: an orphan once FAILED commits.
      { execution: captured(7, 17, false), orphaned: true },
    ]);
  });
  it('counts as a stop a cancelled session or a halted orphan, never a gone session alone (R-1.7)', () => {
    const plan = (p: Partial<Parameters<typeof decideStops>[0]>) => ({ reason: 'stopped_by_parent_task' as const, cancel: [], halt: [], gone: [], ...p });
    const gone = plan({ gone: [{ session_id: id(17), execution: captured(7, 17, false) }] });
    const row = { id: id(17), state: 'RUNNING' as const, execution_id: id(107), instance_id: 'i' };
    // nothing live, so nothing written and nothing swept: the gone row is the reconciler's.
    expect(decideStops(gone, [row])).toEqual({ cancel: [], gone: [], teardowns: [] });
    expect(decisionStops(gone, decideStops(gone, [row]))).toBe(false);
    const orphan = plan({ halt: [captured(6, 16)] });
    expect(decisionStops(orphan, decideStops(orphan, []))).toBe(true);
    const live = plan({ cancel: [{ session_id: id(11), execution: captured(1, 11) }] });
    expect(decisionStops(live, decideStops(live, [{ ...row, id: id(11), execution_id: id(101) }]))).toBe(true);
  });
});

describe('tree stop plan', () => {
  it('cancels every active session with the execution its row names, without registry reads', () => {
    const plan = planTreeStop(
      [
        { id: id(11), state: 'RUNNING', execution_id: id(101), instance_id: 'life-1' },
        { id: id(12), state: 'STARTING', execution_id: null, instance_id: null },
        { id: id(13), state: 'CANCELLED', execution_id: id(103), instance_id: 'life-1' },
      ],
      'tree_paused',
    );
    expect(plan).toEqual({
      reason: 'tree_paused',
      cancel: [
        { session_id: id(11), execution: { execution_id: id(101), session_id: id(11), instance_id: 'life-1', listed: false } },
        { session_id: id(12), execution: null },
      ],
      halt: [],
      gone: [],
    });
  });
});

describe('hold members', () => {
  const tasks = [
    { id: id(1), depth: 0, status: 'IN_PROGRESS' as const },
    { id: id(2), depth: 1, status: 'CANCELLED' as const },
  ];
  it('snapshots every status; a cancel hold skips members already cancelled', () => {
    expect(holdMembersOf(tasks, 'cancel')).toEqual([
      { task_id: id(1), depth: 0, task_status: 'IN_PROGRESS', skip_reason: null },
      { task_id: id(2), depth: 1, task_status: 'CANCELLED', skip_reason: 'already_cancelled' },
    ]);
    expect(holdMembersOf(tasks, 'pause').every((m) => m.skip_reason === null)).toBe(true);
  });
  it('names the hold that is active instead when a release does not match', () => {
    const e = releaseConflict('pause', { hold_id: id(7), mode: 'cancel', root_task_id: id(1) });
    expect(e).toMatchObject({ code: 'CONFLICT', message: 'no active pause hold on this task', details: { active_hold_id: id(7), active_hold_mode: 'cancel' } });
    expect(releaseConflict('cancel', null).details).toBeUndefined();
  });
});

it('bounds the queue', () => {
  expect(() => assertQueueHasRoom(9, 10)).not.toThrow();
  expect(() => assertQueueHasRoom(10, 10)).toThrow(expect.objectContaining({ code: 'CONFLICT', details: { size: 10, limit: 10 } }));
});

it('maps an execution end to a session outcome', () => {
  expect(sessionStateAfterExecutionEnd('exited', 0)).toEqual({ state: 'COMPLETED', error: null });
  expect(sessionStateAfterExecutionEnd('exited', 2).state).toBe('FAILED');
  expect(sessionStateAfterExecutionEnd('lost', null).error).toMatch(/lost/);
  // Ended while the session was active (no stop accepted): it died, and the turn with it.
  expect(sessionStateAfterExecutionEnd('killed', null, 'agentctl_exited')).toEqual({ state: 'FAILED', error: 'agent execution was killed (agentctl_exited)' });
  expect(sessionStateAfterExecutionEnd('graceful', null).error).not.toMatch(/graceful/);
  expect(turnEndAfterExecutionEnd(true)).toBe('error');
  expect(turnEndAfterExecutionEnd(false)).toBe('cancelled');
});

describe('issue 10 domain rules', () => {
  it('a failed launch returns the task to its previous status only when nothing else moved it', () => {
    expect(statusAfterFailedLaunch('IN_PROGRESS', 'TODO', 0)).toBe('TODO');
    expect(statusAfterFailedLaunch('IN_PROGRESS', 'BLOCKED', 0)).toBe('BLOCKED');
    expect(statusAfterFailedLaunch('IN_PROGRESS', 'TODO', 1)).toBeNull(); // another session is active
    expect(statusAfterFailedLaunch('REVIEW', 'TODO', 0)).toBeNull(); // a stop got there first
    expect(statusAfterFailedLaunch('IN_PROGRESS', 'IN_PROGRESS', 0)).toBeNull();
  });
  it('a stalled task (IN_PROGRESS, nothing active) goes to REVIEW', () => {
    const t = { status: 'IN_PROGRESS' as const, archived_at: null, office: false };
    expect(statusOfStalledTask(t, 0)).toBe('REVIEW');
    expect(statusOfStalledTask(t, 1)).toBeNull();
    expect(statusOfStalledTask({ ...t, status: 'TODO' }, 0)).toBeNull();
    expect(statusOfStalledTask({ ...t, office: true }, 0)).toBeNull(); // its scheduler decides
    expect(statusOfStalledTask({ ...t, archived_at: '2026-01-01T00:00:00Z' }, 0)).toBeNull();
  });
  it('queue.changed carries a bounded prompt preview, never half a surrogate pair', () => {
    const long = { prompt: 'a'.repeat(EVENT_PROMPT_PREVIEW - 1) + '😀' + 'b'.repeat(50) };
    const cut = queueEventMessage(long).prompt;
    expect(cut.length).toBeLessThanOrEqual(EVENT_PROMPT_PREVIEW + 1);
    expect(cut.isWellFormed()).toBe(true);
    expect(queueEventMessage({ prompt: 'short' }).prompt).toBe('short');
  });
});
