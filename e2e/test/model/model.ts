import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { checkInvariants, connectMcp, eventually, processAlive } from '@kandev/testkit';
import type { World } from '../support.js';

/*
 * The reference model of the controls (R-1..R-5, R-10) and the commands fast-check draws from, for
 * the model-based test (controls.model.test.ts, R-10.7, B-9).
 *
 * The model is small on purpose: a coordinator task R (never controlled itself; its agent token
 * makes the MCP calls) and up to MAX_CHILDREN direct children. Each child is a leaf, so a tree
 * control on a child holds that child alone and holds never nest. Per child the model keeps what
 * the SPEC pins: its status where a rule fixes it, its active hold (mode and the status snapshot),
 * whether a session is live (and its agent's pid), and the tags of the messages sent to it.
 * Where the SPEC leaves an outcome open (the status after a stop, R-1.4's REVIEW guard; the task's
 * status after its agent was killed; `sent` or `queued` for a message to an idle session whose queue
 * a user cancel paused) the model reads the real value back instead of guessing.
 *
 * Every command checks the answer its request got against the model (the rule it checks is named
 * at each expectation), and after every command `checkStep` checks the invariants:
 *  I1 (R-10.1, R-4.2, R-4.3, R-4.5): no active session on a CANCELLED task or a member of an active hold;
 *  I2 (R-1.6, R-1.8, R-10.2, R-3.5): every message is either in the task's queue or delivered as the
 *     prompt of exactly one turn: never lost, never delivered twice;
 *  I3 (R-6.3, R-10.5, B-4): no agent process alive past TEARDOWN_GRACE_MS + 1 s after its session left
 *     the active states (the fault tests' checker, `processViolations`);
 *  I4 (R-4.6, R-4.2, R-10.1): the statuses the rules pin equal the model's: a restore returns exactly
 *     the snapshots (already_cancelled members stay CANCELLED), a pause changes no status;
 *  I5 (B-3): every control sent has its audit row (action) on its task, checked by each command;
 *  I6 (B-4, B-5, R-7): the fault tests' invariant checker is clean (`checkInvariants`: no violation
 *     past its bound: no session active without an execution, no effect applied twice, every control
 *     audited, ...);
 *  I7 (R-4.7, B-5): the tree's cost summary is the sum of the cost events sent, each counted once.
 */

export const MAX_CHILDREN = 3;
/** The stack's TEARDOWN_GRACE_MS (controls.model.test.ts starts it so). */
export const GRACE_MS = 500;
/** gone within the grace + 1 s of the logical end. */
export const PROCESS_BOUND_MS = GRACE_MS + 1_000;
/** An agent that stays in its turn for the whole run. */
const LONG_TURN = (tag = randomUUID()) => JSON.stringify({ script: [{ sleep_ms: 300_000 }], tag });
/** R-10.5's stubborn agent: ignores the cancel and SIGTERM. */
const STUBBORN_TURN = () => JSON.stringify({ script: [{ sleep_ms: 300_000 }], ignore_cancel: true, ignore_sigterm: true });

type Status = 'TODO' | 'SCHEDULING' | 'IN_PROGRESS' | 'REVIEW' | 'BLOCKED' | 'WAITING_FOR_INPUT' | 'COMPLETED' | 'FAILED' | 'CANCELLED';
const ACTIVE = ['CREATED', 'STARTING', 'RUNNING', 'WAITING_FOR_INPUT'];

export interface ChildModel {
  id: string;
  /** What the rules pin; null: not pinned by the last step (read back from the system). */
  status: Status | null;
  hold: null | { mode: 'pause' | 'cancel'; snapshot: Status | null; alreadyCancelled: boolean };
  live: null | { sessionId: string; pid: number; stubborn: boolean };
  /** Tags of the messages sent to it and accepted (queued, sent or started). */
  messages: string[];
}

export interface Model {
  rootId: string;
  children: ChildModel[];
  costCents: number;
}

export interface Real {
  w: World;
  mcp: Awaited<ReturnType<typeof connectMcp>>;
  /** Session id → agent pid, for the process invariant. */
  agentPids: Map<string, number>;
  /** What ran, for the failure report. */
  trace: string[];
}

type Cmd = fc.AsyncCommand<Model, Real, boolean>;

function fail(rule: string, what: string, got: unknown): never {
  throw new Error(`${rule}: ${what}; got ${JSON.stringify(got)}`);
}
function expectThat(ok: boolean, rule: string, what: string, got: unknown): void {
  if (!ok) fail(rule, what, got);
}

const childOf = (m: Model, i: number) => m.children[i % m.children.length]!;
const isCancelled = (c: ChildModel) => c.status === 'CANCELLED';

async function taskOf(r: Real, id: string) {
  return (await r.w.api.get(`/tasks/${id}`)).body as { status: Status; sessions: Array<{ id: string; state: string }> };
}
async function auditActions(r: Real, id: string): Promise<string[]> {
  return ((await r.w.api.get(`/tasks/${id}/audit`)).body as Array<{ action: string }>).map((a) => a.action);
}
/** I5 (B-3): the control left one more audit row with its action on its task. */
async function audited(r: Real, id: string, action: string, before: string[]): Promise<void> {
  const after = await auditActions(r, id);
  const count = (l: string[]) => l.filter((a) => a === action).length;
  expectThat(count(after) > count(before), 'I5 (B-3)', `a ${action} audit row on ${id}`, after.slice(0, 5));
}
/** The live session's agent pid, once its execution runs. */
async function pidOf(r: Real, sessionId: string): Promise<number> {
  const pid = await eventually(async () => {
    const s = (await r.w.api.get(`/sessions/${sessionId}`)).body as { execution: { pid: number | null; status: string } | null };
    return s.execution?.pid && (s.execution.status === 'RUNNING' || s.execution.status === 'READY') ? s.execution.pid : null;
  }, 60_000);
  r.agentPids.set(sessionId, pid);
  return pid;
}
async function syncStatus(r: Real, c: ChildModel): Promise<void> {
  c.status = (await taskOf(r, c.id)).status;
}

// ------------------------------------------------------------------------------------ commands

class CreateChild implements Cmd {
  check = (m: Readonly<Model>) => m.children.length < MAX_CHILDREN;
  async run(m: Model, r: Real) {
    const { workspace_id } = (await taskOf(r, m.rootId)) as unknown as { workspace_id: string };
    const t = await r.w.api.ok('POST', '/tasks', { workspace_id, parent_id: m.rootId, title: `child-${m.children.length}` });
    m.children.push({ id: t.id, status: 'TODO', hold: null, live: null, messages: [] });
  }
  toString = () => 'createChild';
}

class StartSession implements Cmd {
  constructor(
    readonly i: number,
    readonly stubborn: boolean,
  ) {}
  check = (m: Readonly<Model>) => m.children.length > 0 && !childOf(m as Model, this.i).live;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const before = await auditActions(r, c.id);
    const res = await r.w.api.post(`/tasks/${c.id}/sessions`, { prompt: this.stubborn ? STUBBORN_TURN() : LONG_TURN() });
    if (isCancelled(c) || c.hold) {
      // R-10.1 (cancelled), R-4.3/R-4.2 (held): refused, nothing launched.
      expectThat(res.status === 409, isCancelled(c) ? 'R-10.1' : 'R-4.2', 'a start on a cancelled or held task is CONFLICT', res);
      return;
    }
    expectThat(res.status === 201, 'R-12.1', 'a start on an idle task launches', res);
    c.live = { sessionId: res.body.id, pid: await pidOf(r, res.body.id), stubborn: this.stubborn };
    c.status = 'IN_PROGRESS';
    await audited(r, c.id, 'session.start', before);
  }
  toString = () => `start(${this.i}${this.stubborn ? ', stubborn' : ''})`;
}

class Message implements Cmd {
  constructor(
    readonly i: number,
    readonly mode: 'queued' | 'interrupt',
  ) {}
  check = (m: Readonly<Model>) => m.children.length > 0;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const tag = randomUUID();
    const before = await auditActions(r, c.id);
    const res = await r.mcp.callJson('message_task_kandev', { task_id: c.id, prompt: LONG_TURN(tag), delivery_mode: this.mode });
    if (isCancelled(c)) {
      expectThat(res.isError && /CONFLICT/.test(res.text), 'R-10.1', 'a message to a CANCELLED task is CONFLICT, nothing stored', res);
      return;
    }
    expectThat(!res.isError, 'R-1.8', 'a message to a live or idle child is accepted', res);
    const status = res.json.status as 'queued' | 'sent' | 'started';
    c.messages.push(tag);
    if (c.hold) {
      // stored for the first session after the release, never refused or lost.
      expectThat(status === 'queued', 'R-10.2', 'a message to a paused member is queued', res.json);
      return;
    }
    if (!c.live) {
      // an idle child gets it at once; a session had to start.
      expectThat(status === 'started', 'R-1.8', 'a message to a child with no session starts one', res.json);
      c.live = { sessionId: res.json.session_id, pid: await pidOf(r, res.json.session_id), stubborn: false };
      c.status = 'IN_PROGRESS';
      return;
    }
    if (this.mode === 'interrupt') {
      // sent, or kept queued when it cannot land safely (never an error after the insert).
      expectThat(status === 'sent' || status === 'queued', 'R-1.8', 'an interrupt is sent or stays queued', res.json);
      await audited(r, c.id, 'mcp.message_task.interrupt', before);
    } else {
      expectThat(status === 'queued' || status === 'sent', 'R-1.8', 'a queued message to a live child is queued (sent when it is idle)', res.json);
    }
  }
  toString = () => `message(${this.i}, ${this.mode})`;
}

class OperatorStop implements Cmd {
  constructor(readonly i: number) {}
  check = (m: Readonly<Model>) => m.children.length > 0;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const before = await auditActions(r, c.id);
    const res = await r.w.api.post(`/tasks/${c.id}/stop`, {});
    if (c.live) {
      // the live session is cancelled; the answer says stopped.
      expectThat(res.status === 200 && res.body.status === 'stopped', 'R-2.2', 'a stop of a live task answers stopped', res);
      await audited(r, c.id, 'task.stop', before);
      c.live = null;
    } else {
      // R-2.3 (nothing active, nothing registered → NOT_FOUND) or R-2.1 (an execution still being torn down is halted).
      expectThat(res.status === 404 || (res.status === 200 && res.body.status === 'stopped'), 'R-2.3', 'a stop of an idle task is NOT_FOUND', res);
    }
    await syncStatus(r, c); // R-1.4's guarded REVIEW: read back
  }
  toString = () => `operatorStop(${this.i})`;
}

class McpStop implements Cmd {
  constructor(readonly i: number) {}
  check = (m: Readonly<Model>) => m.children.length > 0;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const before = await auditActions(r, c.id);
    const t0 = await taskOf(r, c.id);
    const res = await r.mcp.callJson('stop_task_kandev', { task_id: c.id });
    expectThat(!res.isError, 'R-1.5', 'stop_task_kandev of a direct child answers', res);
    if (c.live) {
      expectThat(res.json.status === 'stopped', 'R-1.5', 'a live child is stopped', res.json);
      c.live = null;
    } else {
      expectThat(res.json.status === 'not_running', 'R-1.5', 'nothing live → not_running', res.json);
      // not_running changes nothing (same task status).
      const t1 = await taskOf(r, c.id);
      expectThat(t1.status === t0.status, 'R-10.3', 'not_running changes nothing', { before: t0.status, after: t1.status });
    }
    await audited(r, c.id, 'mcp.stop_task', before);
    await syncStatus(r, c);
  }
  toString = () => `mcpStop(${this.i})`;
}

class TurnCancel implements Cmd {
  constructor(readonly i: number) {}
  check = (m: Readonly<Model>) => m.children.length > 0 && childOf(m as Model, this.i).live !== null;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const live = c.live!;
    const before = await auditActions(r, c.id);
    const res = await r.w.api.post(`/sessions/${live.sessionId}/cancel`, {});
    const s = (await r.w.api.get(`/sessions/${live.sessionId}`)).body as { state: string };
    // A stubborn agent's turn is always in flight: it never ends it, and an interrupt cannot land on it.
    if (live.stubborn) {
      // not acknowledged: the answer names the escalation, the session is CANCELLED
      // as by a stop (not FAILED), and the agent is gone within its bound (I3).
      expectThat(
        res.status === 409 && res.body.error?.details?.escalation === 'teardown' && s.state === 'CANCELLED',
        'R-10.5',
        'an unacknowledged cancel answers the escalation and the session is CANCELLED',
        { res, state: s.state },
      );
      c.live = null;
      await audited(r, c.id, 'agent.cancel', before);
      await syncStatus(r, c);
      return;
    }
    // cancelled, or a no-op success when no turn is in flight; the agent lives on.
    expectThat(res.status === 200, 'R-3.1', 'a turn cancel of a live session succeeds', res);
    expectThat(processAlive(live.pid), 'R-3.1', 'a turn cancel does not kill the agent', live);
    await audited(r, c.id, 'agent.cancel', before);
  }
  toString = () => `turnCancel(${this.i})`;
}

class Hold implements Cmd {
  constructor(
    readonly i: number,
    readonly op: 'pause' | 'resume' | 'cancel' | 'restore',
  ) {}
  check = (m: Readonly<Model>) => m.children.length > 0;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const before = await auditActions(r, c.id);
    const res = await r.w.api.post(`/tasks/${c.id}/tree/${this.op}`, { reason: 'model' });
    const creates = this.op === 'pause' || this.op === 'cancel';
    const valid = creates ? c.hold === null : c.hold?.mode === (this.op === 'resume' ? 'pause' : 'cancel');
    if (!valid) {
      // R-4.8 (a member of an active hold), R-4.4 / R-4.6 (nothing to release).
      expectThat(res.status === 409, creates ? 'R-4.8' : this.op === 'resume' ? 'R-4.4' : 'R-4.6', `tree ${this.op} is CONFLICT here`, res);
      return;
    }
    expectThat(res.status === 200, 'R-4', `tree ${this.op} is applied`, res);
    await audited(r, c.id, `tree.${this.op}`, before);
    if (this.op === 'pause') {
      c.hold = { mode: 'pause', snapshot: c.status, alreadyCancelled: isCancelled(c) };
      c.live = null; // every live session stopped; status unchanged
    } else if (this.op === 'cancel') {
      c.hold = { mode: 'cancel', snapshot: c.status, alreadyCancelled: isCancelled(c) };
      c.status = 'CANCELLED';
      c.live = null;
    } else if (this.op === 'resume') {
      c.hold = null; // nothing replayed
    } else {
      // exactly the snapshot, except already_cancelled members.
      c.status = c.hold!.alreadyCancelled ? 'CANCELLED' : c.hold!.snapshot;
      c.hold = null;
    }
  }
  toString = () => `tree${this.op[0]!.toUpperCase()}${this.op.slice(1)}(${this.i})`;
}

class Wakeup implements Cmd {
  constructor(readonly i: number) {}
  // A wakeup for a task with a live session is the coalescing rule's (issue #54): not modelled.
  check = (m: Readonly<Model>) => m.children.length > 0 && !childOf(m as Model, this.i).live;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const wk = await r.w.api.ok('POST', '/wakeups', { task_id: c.id, reason: 'model', payload: { prompt: LONG_TURN() } });
    const done = await eventually(async () => {
      const w = (await r.w.api.get(`/wakeups/${wk.id}`)).body as { status: string; skip_reason: string | null; session_id: string | null };
      return w.status === 'finished' || w.status === 'cancelled' ? w : null;
    }, 60_000);
    if (isCancelled(c)) {
      // R-10.1 (a cancel hold's member is CANCELLED too: R-4.3's tree_cancelled says the same).
      expectThat(
        done.session_id === null && (done.skip_reason === 'task_cancelled' || (c.hold?.mode === 'cancel' && done.skip_reason === 'tree_cancelled')),
        'R-10.1',
        'a wakeup of a CANCELLED task launches nothing',
        done,
      );
      return;
    }
    if (c.hold) {
      expectThat(done.session_id === null && done.skip_reason === 'tree_paused', 'R-4.3', 'a wakeup of a paused member launches nothing', done);
      return;
    }
    expectThat(done.session_id !== null, 'R-4.3', 'an admitted wakeup starts a session', done);
    c.live = { sessionId: done.session_id!, pid: await pidOf(r, done.session_id!), stubborn: false };
    c.status = 'IN_PROGRESS';
  }
  toString = () => `wakeup(${this.i})`;
}

class PatchStatus implements Cmd {
  constructor(
    readonly i: number,
    readonly status: 'TODO' | 'REVIEW' | 'CANCELLED' | 'BLOCKED',
  ) {}
  // What PATCH does to a live session or a held member is not pinned: moved only when idle and free.
  check = (m: Readonly<Model>) => m.children.length > 0 && !childOf(m as Model, this.i).live && !childOf(m as Model, this.i).hold;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const before = await auditActions(r, c.id);
    const res = await r.w.api.patch(`/tasks/${c.id}`, { status: this.status });
    expectThat(res.status === 200 && res.body.status === this.status, 'R-10.1', 'an operator sets a status', res);
    await audited(r, c.id, 'task.update', before);
    c.status = this.status;
  }
  toString = () => `patch(${this.i}, ${this.status})`;
}

class CostEvent implements Cmd {
  constructor(
    readonly i: number,
    readonly cents: number,
  ) {}
  check = (m: Readonly<Model>) => m.children.length > 0;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const ev = { task_id: c.id, usage_event_id: randomUUID(), model: 'model-test', cost_cents: this.cents, tokens_in: 1, tokens_cached_in: 0, tokens_out: 1 };
    const first = await r.w.api.post('/cost-events', ev);
    expectThat(first.status === 201, 'R-4.7', 'a cost event is recorded', first);
    // B-5: the same usage_event_id again is counted once.
    const again = await r.w.api.post('/cost-events', ev);
    expectThat(again.status === 200, 'B-5', 'a repeated cost event answers 200', again);
    m.costCents += this.cents;
  }
  toString = () => `cost(${this.i}, ${this.cents})`;
}

class KillAgent implements Cmd {
  constructor(readonly i: number) {}
  check = (m: Readonly<Model>) => m.children.length > 0 && childOf(m as Model, this.i).live !== null;
  async run(m: Model, r: Real) {
    const c = childOf(m, this.i);
    const live = c.live!;
    process.kill(live.pid, 'SIGKILL');
    // The agent died without a stop: its session ends (agentctl reports the exit) within the reconcile bound.
    await eventually(async () => {
      const t = await taskOf(r, c.id);
      const s = t.sessions.find((x) => x.id === live.sessionId);
      return s && !ACTIVE.includes(s.state);
    }, 60_000);
    c.live = null;
    await syncStatus(r, c); // what a crash does to the task is not pinned
  }
  toString = () => `kill9(${this.i})`;
}

export const commands = [
  fc.constant(new CreateChild()),
  fc.tuple(fc.nat(MAX_CHILDREN - 1), fc.boolean()).map(([i, stubborn]) => new StartSession(i, stubborn)),
  fc.tuple(fc.nat(MAX_CHILDREN - 1), fc.constantFrom('queued' as const, 'interrupt' as const)).map(([i, mode]) => new Message(i, mode)),
  fc.nat(MAX_CHILDREN - 1).map((i) => new OperatorStop(i)),
  fc.nat(MAX_CHILDREN - 1).map((i) => new McpStop(i)),
  fc.nat(MAX_CHILDREN - 1).map((i) => new TurnCancel(i)),
  fc
    .tuple(fc.nat(MAX_CHILDREN - 1), fc.constantFrom('pause' as const, 'resume' as const, 'cancel' as const, 'restore' as const))
    .map(([i, op]) => new Hold(i, op)),
  fc.nat(MAX_CHILDREN - 1).map((i) => new Wakeup(i)),
  fc
    .tuple(fc.nat(MAX_CHILDREN - 1), fc.constantFrom('TODO' as const, 'REVIEW' as const, 'CANCELLED' as const, 'BLOCKED' as const))
    .map(([i, s]) => new PatchStatus(i, s)),
  fc.tuple(fc.nat(MAX_CHILDREN - 1), fc.integer({ min: 1, max: 500 })).map(([i, cents]) => new CostEvent(i, cents)),
  fc.nat(MAX_CHILDREN - 1).map((i) => new KillAgent(i)),
];

// ------------------------------------------------------------------------------------ invariants

/** I1, I2, I4, I6, I7 after a step (I3 is inside I6's checker; I5 in the commands). */
export async function checkStep(m: Model, r: Real): Promise<void> {
  for (const c of m.children) {
    const t = await taskOf(r, c.id);
    const active = t.sessions.filter((s) => ACTIVE.includes(s.state));
    // I1
    if (t.status === 'CANCELLED' || c.hold)
      expectThat(active.length === 0, 'I1 (R-10.1, R-4.2, R-4.5)', `no active session on ${c.id} (${t.status}, hold ${c.hold?.mode ?? 'none'})`, active);
    // The model's view of liveness is the system's.
    expectThat(
      c.live ? active.some((s) => s.id === c.live!.sessionId) : active.length === 0,
      'model',
      `${c.id} live = ${c.live?.sessionId ?? 'none'}`,
      t.sessions,
    );
    // I4
    if (c.status !== null) expectThat(t.status === c.status, 'I4 (R-4.6, R-4.2, R-10.1)', `${c.id} status`, { model: c.status, real: t.status });
    // I2
    if (c.messages.length) {
      const queue = ((await r.w.api.get(`/tasks/${c.id}/queue`)).body as Array<{ prompt: string }>).map((q) => q.prompt);
      const delivered: string[] = [];
      for (const s of t.sessions) {
        const items = (
          (await r.w.api.get(`/sessions/${s.id}/messages?limit=500`)).body as {
            items: Array<{ role: string; kind: string; text: string; turn_id: string | null }>;
          }
        ).items;
        for (const it of items) if (it.kind === 'prompt' && it.role === 'user') delivered.push(it.text);
      }
      for (const tag of c.messages) {
        const inQueue = queue.filter((p) => p.includes(tag)).length;
        const sent = delivered.filter((p) => p.includes(tag)).length;
        expectThat(inQueue + sent === 1, 'I2 (R-1.8, R-10.2, R-1.6)', `message ${tag} to ${c.id} queued or delivered exactly once`, { inQueue, sent });
      }
    }
  }
  // I7
  const cost = (await r.w.api.get(`/tasks/${m.rootId}/tree/cost-summary`)).body as { cost_cents: number };
  expectThat(cost.cost_cents === m.costCents, 'I7 (R-4.7, B-5)', 'the tree cost is the sum of the events sent, each once', { model: m.costCents, real: cost });
  // I3 + I6
  const report = await checkInvariants(r.w.stack, { agentPids: r.agentPids, bounds: { graceMs: PROCESS_BOUND_MS, reconcileMs: 30_000 } });
  expectThat(report.violations.length === 0, 'I3/I6 (R-10.5, B-4, B-3, B-5)', 'the invariant checker is clean', report.violations);
}

/** Runs one command and then the step's invariants, noting both for the report. */
export function checked(cmd: Cmd): Cmd {
  return {
    check: (m) => cmd.check(m),
    async run(m, r) {
      r.trace.push(cmd.toString());
      await cmd.run(m, r);
      await checkStep(m, r);
    },
    toString: () => cmd.toString(),
  };
}
