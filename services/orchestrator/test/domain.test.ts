import { describe, expect, it } from 'vitest';
import type { Execution } from '@kandev/contracts';
import { assertDirectParent } from '../src/domain/access.js';
import { assertQueueHasRoom } from '../src/domain/messages.js';
import { livenessOf, planTaskStop } from '../src/domain/stop.js';
import { mayMoveToReview, sessionStateAfterExecutionEnd, turnEndAfterExecutionEnd } from '../src/domain/transitions.js';

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
      [{ id: id(11), state: 'RUNNING', execution_id: id(101) }, { id: id(12), state: 'STARTING', execution_id: null }],
      [exec(1, 11), exec(2, 13, 'READY'), exec(3, 14, 'STOPPED')],
    );
    expect(plan.cancel).toEqual([
      { session_id: id(11), execution: exec(1, 11) },
      { session_id: id(12), execution: null },
    ]);
    expect(plan.orphans.map((o) => o.execution_id)).toEqual([id(102)]);
  });
  it('classifies a session whose execution is gone as not live', () => {
    expect(livenessOf({ id: id(11), state: 'RUNNING', execution_id: id(101) }, []).kind).toBe('gone');
    expect(livenessOf({ id: id(11), state: 'STARTING', execution_id: null }, []).kind).toBe('launching');
    expect(livenessOf({ id: id(11), state: 'FAILED', execution_id: id(101) }, [exec(1, 11)]).kind).toBe('inactive');
  });
  it('never captures an execution other than the session\'s own', () => {
    const l = livenessOf({ id: id(11), state: 'RUNNING', execution_id: id(101) }, [exec(2, 11)]);
    expect(l.kind).toBe('gone');
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
