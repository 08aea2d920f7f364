import { z } from 'zod';
import type { Execution } from '@kandev/contracts';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { eventually } from '@kandev/testkit';
import { decideCancel } from '../src/domain/cancel.js';
import { abandonLaunch } from '../src/domain/launch.js';
import { backstopDelayMs, leftoversToReport, shutdownGrace, stopHow, stopRequestTimeoutMs, stoppedEventId, teardownGrace } from '../src/domain/teardown.js';
import { promptAccepted, promptRefusal, turnCompleted, turnStarted, type TurnView } from '../src/domain/turns.js';
import { StateFile } from '../src/store/state-file.js';
import { refreshSliceOf, refreshSlices } from '../src/domain/liveness.js';

const T1 = '00000000-0000-4000-8000-000000000001';
const T2 = '00000000-0000-4000-8000-000000000002';

describe('cancel target fencing (B-2)', () => {
  it('cancels the current turn when none or the same turn is named', () => {
    expect(decideCancel({ status: 'RUNNING', turn_id: T1 }, undefined)).toEqual({ kind: 'cancel', turnId: T1 });
    expect(decideCancel({ status: 'RUNNING', turn_id: T1 }, null)).toEqual({ kind: 'cancel', turnId: T1 });
    expect(decideCancel({ status: 'RUNNING', turn_id: T1 }, T1)).toEqual({ kind: 'cancel', turnId: T1 });
  });
  it('fails closed on another turn', () => {
    expect(decideCancel({ status: 'RUNNING', turn_id: T2 }, T1)).toEqual({ kind: 'turn_mismatch', current: T2, requested: T1 });
  });
  it('no turn in flight is a no-op, whether or not an (old) turn is named', () => {
    expect(decideCancel({ status: 'READY', turn_id: null }, undefined)).toEqual({ kind: 'no_active_turn' });
    expect(decideCancel({ status: 'READY', turn_id: null }, T1)).toEqual({ kind: 'no_active_turn' });
    expect(decideCancel({ status: 'STARTING', turn_id: null }, undefined)).toEqual({ kind: 'no_active_turn' });
  });
  it('a stopping execution is not running', () => {
    expect(decideCancel({ status: 'STOPPING', turn_id: T1 }, T1)).toEqual({ kind: 'not_running' });
  });
});

describe('turn bookkeeping', () => {
  const idle: TurnView = { status: 'READY', turn_id: null, finished: [] };

  it('prompt → started → completed publishes each once and returns to READY', () => {
    const a = promptAccepted(idle, T1).view;
    expect(a).toMatchObject({ status: 'RUNNING', turn_id: T1 });
    const s = turnStarted(a, T1);
    expect(s.publish).toBe(true);
    expect(s.changed).toBe(false);
    const c = turnCompleted(s.view, T1);
    expect(c).toMatchObject({ publish: true, changed: true, view: { status: 'READY', turn_id: null, finished: [T1] } });
    // The cancel reply and agentctl's line both report the end: the second is a no-op.
    expect(turnCompleted(c.view, T1)).toMatchObject({ publish: false, changed: false });
    // A late start line for a finished turn does not bring it back.
    expect(turnStarted(c.view, T1)).toMatchObject({ publish: false, changed: false, view: { turn_id: null } });
  });
  it('a completion for a turn that is not current leaves the current turn in flight', () => {
    const running: TurnView = { status: 'RUNNING', turn_id: T2, finished: [] };
    expect(turnCompleted(running, T1).view).toMatchObject({ status: 'RUNNING', turn_id: T2, finished: [T1] });
  });
  it('STOPPING stays STOPPING whatever turns do', () => {
    const stopping: TurnView = { status: 'STOPPING', turn_id: T1, finished: [] };
    expect(turnCompleted(stopping, T1).view.status).toBe('STOPPING');
    expect(turnStarted({ ...stopping, turn_id: null }, T2).view.status).toBe('STOPPING');
  });
  it('refuses prompts while a turn is in flight, while starting and while stopping', () => {
    expect(promptRefusal(idle)).toBeNull();
    expect(promptRefusal({ ...idle, status: 'RUNNING', turn_id: T1 })?.code).toBe('CONFLICT');
    expect(promptRefusal({ ...idle, status: 'STARTING' })?.message).toMatch(/starting/);
    expect(promptRefusal({ ...idle, status: 'STOPPING' })?.message).toBe('agent not running');
  });
  it('keeps a bounded memory of finished turns', () => {
    let v = idle;
    for (let i = 0; i < 100; i++) v = turnCompleted(v, `turn-${i}`).view;
    expect(v.finished).toHaveLength(32);
    expect(v.finished.at(-1)).toBe('turn-99');
  });
});

describe('teardown rules (R-6.3, B-4)', () => {
  it("an execution's stop report has one event id, whoever reports it (the teardown, or start-up cleanup after a crash)", () => {
    const a = '5eac3e0f-391c-490d-9aec-818088a3e188';
    expect(stoppedEventId(a)).toBe(stoppedEventId(a));
    expect(stoppedEventId(a)).not.toBe(stoppedEventId('768f47fa-f9ca-456d-a686-57715b368375'));
    expect(z.uuid().safeParse(stoppedEventId(a)).success).toBe(true);
  });

  it('records how the execution ended', () => {
    expect(stopHow({ exitedOnItsOwn: true, killedByUs: true })).toBe('exited');
    expect(stopHow({ exitedOnItsOwn: false, killedByUs: true, agentctlHow: 'graceful' })).toBe('killed');
    expect(stopHow({ exitedOnItsOwn: false, killedByUs: false, agentctlHow: 'killed' })).toBe('killed');
    expect(stopHow({ exitedOnItsOwn: false, killedByUs: false, agentctlHow: 'graceful' })).toBe('graceful');
    expect(stopHow({ exitedOnItsOwn: false, killedByUs: false })).toBe('graceful');
    // A dead agentctl is the execution dying, never a graceful stop, whatever the cleanup did.
    expect(stopHow({ exitedOnItsOwn: false, killedByUs: false, agentctlDied: { code: null, signal: 'SIGKILL' } })).toBe('killed');
    expect(stopHow({ exitedOnItsOwn: true, killedByUs: false, agentctlDied: { code: null, signal: 'SIGKILL' } })).toBe('killed');
    expect(stopHow({ exitedOnItsOwn: false, killedByUs: false, agentctlDied: { code: 1, signal: null } })).toBe('exited');
  });
  it('grace: the request wins, the default fills in, both are capped; shutdown uses a third of its budget at most', () => {
    expect(teardownGrace(300, 2000)).toBe(300);
    expect(teardownGrace(0, 2000)).toBe(0);
    expect(teardownGrace(undefined, 2000)).toBe(2000);
    expect(teardownGrace(10_000_000, 2000)).toBe(600_000);
    expect(shutdownGrace(2000, 10_000)).toBe(2000);
    expect(shutdownGrace(5000, 9000)).toBe(3000);
  });
  it('gives agentctl its one grace deadline and the kill before calling it silent; the backstop fires just after the deadline (R-10.5)', () => {
    expect(stopRequestTimeoutMs(1000)).toBeGreaterThan(1000 + 1000);
    expect(stopRequestTimeoutMs(1000)).toBeLessThan(2 * 1000 + 3_000);
    expect(backstopDelayMs(2000)).toBeGreaterThan(2000);
    // The SPEC bound is the grace + 1 s: the backstop leaves most of that second for the signal to land.
    expect(backstopDelayMs(2000)).toBeLessThanOrEqual(2000 + 500);
  });
  it('reports each leftover of this instance once, from the state file and the registry', () => {
    const entry = (id: string, instance: string): Execution => ({
      execution_id: id,
      session_id: T1,
      task_id: T1,
      workspace_id: T1,
      instance_id: instance,
      protocol: 'acp',
      agent: 'scripted-acp',
      pid: 42,
      agentctl_pid: 41,
      agentctl_url: null,
      status: 'READY',
      turn_id: null,
      fence_epoch: 0,
      started_at: '',
      updated_at: '',
    });
    const fromState = [{ execution_id: 'a', workspace_id: T1, task_id: T1, session_id: T1, pid: 7 }];
    const out = leftoversToReport(fromState, [entry('a', 'me'), entry('b', 'me'), entry('c', 'someone-else')], 'me');
    expect(out.map((l) => [l.execution_id, l.pid])).toEqual([
      ['a', 7],
      ['b', 42],
    ]);
  });
});

describe('an abandoned launch (B-1, one failure path)', () => {
  const X = '00000000-0000-4000-8000-0000000000aa';

  it('a stop between steps: joins the stop, answers CONFLICT stopped while launching', () => {
    const p = abandonLaunch({ step: 'stopped' }, true, X);
    expect(p.answer).toMatchObject({ code: 'CONFLICT', message: 'execution was stopped while launching', details: { execution_id: X } });
  });

  it('an agent that never came up is removed without grace: UNAVAILABLE, or the stop that killed it', () => {
    const alone = abandonLaunch({ step: 'ready', cause: new Error('agentctl exited before ready (code 1, signal null)') }, false, X);
    expect(alone.teardown).toEqual({ reason: 'launch_failed', graceful: false });
    expect(alone.answer).toMatchObject({ code: 'UNAVAILABLE', message: 'agent failed to start: agentctl exited before ready (code 1, signal null)' });
    expect(abandonLaunch({ step: 'ready', cause: new Error('killed') }, true, X).answer).toMatchObject({
      code: 'CONFLICT',
      message: 'execution was stopped while launching',
    });
  });

  it('a fence refusal is the answer and the teardown reason, stop or not', () => {
    for (const stopped of [false, true]) {
      const p = abandonLaunch({ step: 'admit', refusal: 'task stopped at epoch 5' }, stopped, X);
      expect(p.teardown).toEqual({ reason: 'launch fenced: task stopped at epoch 5', graceful: true });
      expect(p.answer).toMatchObject({ code: 'CONFLICT', message: 'launch fenced: task stopped at epoch 5' });
    }
  });

  it('a failed first prompt (or a defect) answers with its own error after a graceful teardown', () => {
    const err = new Error('agent not running');
    expect(abandonLaunch({ step: 'first_prompt', cause: err }, true, X)).toMatchObject({
      teardown: { reason: 'first_prompt_failed', graceful: true },
      answer: { rethrow: err },
      log: { level: 'error' },
    });
    expect(abandonLaunch({ step: 'unexpected', cause: err }, false, X)).toMatchObject({
      teardown: { reason: 'launch_failed', graceful: true },
      answer: { rethrow: err },
    });
  });
});

describe('state file', () => {
  it('round-trips what is live and reads a missing or malformed file as nothing left (with the problem named)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kandev-state-'));
    try {
      const f = new StateFile(dir, 'life-x');
      expect(f.readLeftovers()).toEqual({ entries: [], problem: null });
      const e = {
        execution_id: 'e1',
        workspace_id: T1,
        task_id: T1,
        session_id: T2,
        agentctl: { pid: 10, start_time: '5' },
        agent: { pid: 11, start_time: '6' },
      };
      f.set(e);
      expect(new StateFile(dir, 'life-x').readLeftovers()).toEqual({ entries: [e], problem: null });
      f.remove('e1');
      // Removals are written together, a moment later.
      await eventually(async () => new StateFile(dir, 'life-x').readLeftovers().entries.length === 0);
      writeFileSync(f.path, '{broken');
      expect(new StateFile(dir, 'life-x').readLeftovers()).toEqual({ entries: [], problem: 'state file is malformed' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('writes removals together a moment later, and an added entry at once with every removal before it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kandev-state-'));
    try {
      const f = new StateFile(dir, 'life-x');
      const entry = (id: string) => ({ execution_id: id, workspace_id: T1, task_id: T1, session_id: T2, agentctl: { pid: 10, start_time: '5' }, agent: null });
      for (const id of ['e1', 'e2', 'e3']) f.set(entry(id));
      f.remove('e1');
      f.remove('e2');
      const written = () => new StateFile(dir, 'life-x').readLeftovers().entries.map((e) => e.execution_id);
      // Not yet written (removals are gathered): the file still lists them.
      expect(written()).toEqual(['e1', 'e2', 'e3']);
      f.set(entry('e4'));
      expect(written()).toEqual(['e3', 'e4']);
      f.remove('e3');
      expect(await eventually(async () => (written().length === 1 ? written() : null))).toEqual(['e4']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('registry refresh slices', () => {
  it('renews every execution once per period, spread over slices of it', () => {
    expect(refreshSlices(5_000)).toEqual({ tickMs: 500, slices: 10 });
    expect(refreshSlices(100)).toEqual({ tickMs: 20, slices: 5 });
    expect(refreshSlices(30)).toEqual({ tickMs: 30, slices: 1 });
    const ids = Array.from({ length: 1_000 }, () => crypto.randomUUID());
    const counts = new Array(10).fill(0);
    for (const id of ids) counts[refreshSliceOf(id, 10)]++;
    // Every id in one slice, the same one each time, and the slices about even.
    expect(ids.every((id) => refreshSliceOf(id, 10) === refreshSliceOf(id, 10))).toBe(true);
    for (const c of counts) expect(c).toBeGreaterThan(50);
  });
});
