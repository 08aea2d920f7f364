import { describe, expect, it } from 'vitest';
import { outcomeOf } from '../src/domain/wakeups.js';

/** How a launch attempt ends a claimed wakeup (R-4.3, R-10.1, ADR 0060). */
describe('outcomeOf', () => {
  it('finishes a launched or joined wakeup with its session', () => {
    expect(outcomeOf({ kind: 'launched', session_id: 's1' }, 1, 5)).toEqual({ status: 'finished', skip_reason: null, session_id: 's1' });
  });

  it("records the start rule's reason when the orchestrator gives one, else the hold's, else launch_refused", () => {
    expect(outcomeOf({ kind: 'refused', hold_mode: null, reason: 'cancelled', skip_reason: 'task_cancelled' }, 1, 5)).toEqual({
      status: 'finished',
      skip_reason: 'task_cancelled',
      session_id: null,
    });
    // An orchestrator that predates the rule's reason: the hold's.
    expect(outcomeOf({ kind: 'refused', hold_mode: 'pause', reason: 'held' }, 1, 5)).toMatchObject({ skip_reason: 'tree_paused' });
    expect(outcomeOf({ kind: 'refused', hold_mode: null, reason: 'archived' }, 1, 5)).toMatchObject({ skip_reason: 'launch_refused' });
  });

  it('queues a failed launch again until its attempts run out', () => {
    expect(outcomeOf({ kind: 'failed', error: 'UNAVAILABLE' }, 1, 3)).toEqual({ status: 'queued' });
    expect(outcomeOf({ kind: 'failed', error: 'UNAVAILABLE' }, 3, 3)).toEqual({ status: 'finished', skip_reason: 'launch_failed', session_id: null });
  });
});
