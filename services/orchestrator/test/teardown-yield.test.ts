import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '@kandev/testkit';
import type { OrchRuntime } from '../src/flows/context.js';
import { TeardownYield } from '../src/flows/teardown-yield.js';
import { startHarness, type Harness } from './harness.js';

/** A decision the test finishes when it chooses. */
function heldDecision(gate: TeardownYield) {
  let finish!: () => void;
  const done = gate.decision(() => new Promise<void>((r) => (finish = r)));
  return { finish: () => (finish(), done) };
}

const settledYet = async (p: Promise<void>) => Promise.race([p.then(() => true), new Promise<boolean>((r) => setImmediate(() => r(false)))]);

describe('TeardownYield (ADR 0012)', () => {
  it('lets a teardown go at once when no decision is in flight', async () => {
    expect(await settledYet(new TeardownYield(60_000).turn())).toBe(true);
  });

  it('holds a teardown until the last decision in flight is taken', async () => {
    const gate = new TeardownYield(60_000);
    const [a, b] = [heldDecision(gate), heldDecision(gate)];
    const turn = gate.turn();
    expect(gate.inFlight).toBe(2);
    await a.finish();
    expect(await settledYet(turn)).toBe(false);
    await b.finish();
    expect(await settledYet(turn)).toBe(true);
  });

  it('counts a decision that fails as taken', async () => {
    const gate = new TeardownYield(60_000);
    const failing = gate.decision(() => Promise.reject(new Error('refused')));
    const turn = gate.turn();
    await expect(failing).rejects.toThrow('refused');
    expect(await settledYet(turn)).toBe(true);
    expect(gate.inFlight).toBe(0);
  });

  it('never holds a teardown longer than its bound', async () => {
    const gate = new TeardownYield(50);
    const held = heldDecision(gate);
    const started = performance.now();
    await gate.turn();
    expect(performance.now() - started).toBeGreaterThanOrEqual(45); // timer granularity
    expect(gate.inFlight).toBe(1);
    await held.finish();
  });

  it('holds nothing with a bound of 0, and releases everything when the instance stops', async () => {
    const off = new TeardownYield(0);
    const offHeld = heldDecision(off);
    expect(await settledYet(off.turn())).toBe(true);
    await offHeld.finish();

    const gate = new TeardownYield(60_000);
    const held = heldDecision(gate);
    const turn = gate.turn();
    gate.close();
    expect(await settledYet(turn)).toBe(true);
    expect(await settledYet(gate.turn())).toBe(true);
    await held.finish();
  });
});

/** Against a real orchestrator, NATS and PostgreSQL; lifecycle faked at the subject level. */
describe('a child stop answered at commit, while another stop decision is in flight', () => {
  let h: Harness;
  beforeAll(async () => {
    // The largest bound allowed, far above the one round trip this test waits: within it, the
    // teardown can only go when the decision does.
    h = await startHarness({ TEARDOWN_YIELD_MS: '2000' });
  });
  afterAll(async () => h?.stop());

  it('answers at once and sends its teardown once that decision is taken', async () => {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const [a, b] = [await h.task(ws.id, 'a', parent.id), await h.task(ws.id, 'b', parent.id)];
    const [sa, sb] = [await h.startSession(a.id, 'work'), await h.startSession(b.id, 'work')];
    const execOf = (sessionId: string) => [...h.life.registry.values()].find((e) => e.session_id === sessionId)!.execution_id;
    const [ea, eb] = [execOf(sa.id), execOf(sb.id)];
    const gate = (h.svc.runtime as OrchRuntime).teardownYield;

    // B's stop decision is held in flight: another transaction holds B's task row, which its fence bump needs.
    let release!: () => void;
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const holder = h.sql.begin(async (tx) => {
      await tx`SELECT 1 FROM orchestrator.tasks WHERE id = ${b.id} FOR UPDATE`;
      locked();
      await new Promise<void>((r) => (release = r));
    });
    await isLocked;
    const stopB = h.stopChild(parent.id, b.id);
    await eventually(async () => gate.inFlight === 1 || null, 10_000);

    expect(await h.stopChild(parent.id, a.id)).toEqual({ task_id: a.id, status: 'stopped' });
    // Without the yield, A's teardown request leaves in the callback that runs right after its answer
    // is sent, before the orchestrator reads its next request. So by the answer to one more request
    // on the same connection (the fake lifecycle's), the request would have been delivered here.
    await h.getTask(a.id);
    expect(h.life.stops.map((s) => s.execution_id)).not.toContain(ea);
    expect(gate.inFlight).toBe(1);

    release();
    await holder;
    expect(await stopB).toEqual({ task_id: b.id, status: 'stopped' });
    const sent = await h.teardownsOf([ea, eb]);
    expect(sent.map((s) => s.execution_id).sort()).toEqual([ea, eb].sort());
    expect(gate.inFlight).toBe(0);
  });
});
