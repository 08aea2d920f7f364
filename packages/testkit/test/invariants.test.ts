// The invariant checker's three state invariants can fail: each test writes a violating
// state straight into a real database (or event stream) and expects the checker to name it, next
// to the same state made right, which it must accept.
import { randomUUID } from 'node:crypto';
import { buildEvent, connectNats, ensureEventStream, EventPublisher, type NatsConnection } from '@kandev/runtime';
import postgres from 'postgres';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ControlRequest } from '../src/control-requests.js';
import { checkInvariants, type InvariantName } from '../src/invariants.js';
import { createTestDatabase, type TestDatabase } from '../src/pg.js';
import { startNats, type TestNats } from '../src/nats.js';
import type { Stack } from '../src/stack.js';

let nats: TestNats;
let db: TestDatabase;
let sql: postgres.Sql;
let nc: NatsConnection;
beforeAll(async () => {
  [nats, db] = await Promise.all([startNats(), createTestDatabase()]);
  sql = postgres(db.url, { max: 2, onnotice: () => undefined });
  nc = await connectNats({ url: nats.url, name: 'invariants-test' });
  await ensureEventStream(nc);
});
afterAll(async () => {
  await nc?.close();
  await sql?.end();
  await Promise.all([nats?.stop(), db?.drop()]);
});
// Each test starts from an empty system (the stream too: its facts are global).
beforeEach(async () => {
  await sql.unsafe(
    `TRUNCATE orchestrator.audit_log, orchestrator.tree_hold_members, orchestrator.tree_holds, orchestrator.queued_messages, orchestrator.turns, orchestrator.sessions, orchestrator.tasks, orchestrator.workspaces, holds.cost_events, holds.task_costs CASCADE`,
  );
  const { jetstreamManager } = await import('@nats-io/jetstream');
  await (await jetstreamManager(nc)).streams.purge('KANDEV_EVENTS');
});

const bounds = { graceMs: 1_000, reconcileMs: 1_000 };
const check = async (requests: ControlRequest[] = []) => {
  const stack = { db, nats } as unknown as Stack;
  return (await checkInvariants(stack, { agentPids: new Map(), bounds, requests })).violations;
};
const named = async (invariant: InvariantName, requests: ControlRequest[] = []) =>
  (await check(requests)).filter((v) => v.invariant === invariant).map((v) => v.detail);

async function task() {
  const ws = randomUUID();
  const id = randomUUID();
  await sql`INSERT INTO orchestrator.workspaces (id, name) VALUES (${ws}, 'w')`;
  await sql`INSERT INTO orchestrator.tasks (id, workspace_id, title) VALUES (${id}, ${ws}, 't')`;
  return { id, workspace_id: ws };
}
/** A session that ended (so no registry lookup applies); `cancel_reason` makes it a stopped one. */
async function session(t: { id: string }, state = 'COMPLETED', cancel_reason: string | null = null) {
  const id = randomUUID();
  await sql`INSERT INTO orchestrator.sessions (id, task_id, state, cancel_reason, completed_at) VALUES (${id}, ${t.id}, ${state}, ${cancel_reason}, now())`;
  return id;
}
async function audit(
  t: { id: string; workspace_id: string },
  action: string,
  outcome: string,
  details: Record<string, unknown>,
  extra: { request_id?: string; created_at?: Date } = {},
) {
  await sql`INSERT INTO orchestrator.audit_log (id, task_id, workspace_id, action, actor, request_id, outcome, details, created_at)
            VALUES (${randomUUID()}, ${t.id}, ${t.workspace_id}, ${action}, 'operator:test', ${extra.request_id ?? null}, ${outcome}, ${sql.json(details as never)}, ${extra.created_at ?? new Date()})`;
}
const answered = (r: Omit<ControlRequest, 'sentAt' | 'answeredAt'>): ControlRequest => ({ ...r, sentAt: new Date(Date.now() - 1_000), answeredAt: new Date() });

describe('no event effect is applied twice', () => {
  it('a cost event folded twice into the rollup', async () => {
    const t = await task();
    await sql`INSERT INTO holds.cost_events (id, task_id, usage_event_id, cost_cents, tokens_in, tokens_cached_in, tokens_out) VALUES (${randomUUID()}, ${t.id}, 'u1', 5, 10, 0, 3)`;
    await sql`INSERT INTO holds.task_costs (task_id, events, cost_cents, tokens_in, tokens_out) VALUES (${t.id}, 1, 5, 10, 3)`;
    expect(await named('effect_applied_twice')).toEqual([]);
    await sql`UPDATE holds.task_costs SET events = 2, cost_cents = 10, tokens_in = 20, tokens_out = 6 WHERE task_id = ${t.id}`;
    expect(await named('effect_applied_twice')).toEqual([expect.stringContaining(`task ${t.id}: cost rollup`)]);
  });

  it('two open turns in one session (a prompt dispatched twice)', async () => {
    const t = await task();
    const s = await session(t);
    await sql`INSERT INTO orchestrator.turns (id, session_id, prompt) VALUES (${randomUUID()}, ${s}, 'a')`;
    expect(await named('effect_applied_twice')).toEqual([]);
    await sql`INSERT INTO orchestrator.turns (id, session_id, prompt) VALUES (${randomUUID()}, ${s}, 'a')`;
    expect(await named('effect_applied_twice')).toEqual([`session ${s} has 2 open turns`]);
  });

  it('one request audited twice, and a wakeup that started two sessions', async () => {
    const t = await task();
    await audit(t, 'agent.cancel', 'cancelled', {}, { request_id: 'r1' });
    await audit(t, 'agent.cancel', 'error:UNAVAILABLE', {}, { request_id: 'r1' });
    await audit(t, 'session.start', 'started', { wakeup_id: 'w1' }, { request_id: 'r2' });
    expect(await named('effect_applied_twice')).toEqual([]);
    await audit(t, 'agent.cancel', 'cancelled', {}, { request_id: 'r1' });
    await audit(t, 'session.start', 'started', { wakeup_id: 'w1' }, { request_id: 'r3' });
    expect((await named('effect_applied_twice')).sort()).toEqual([
      expect.stringContaining('request r1 recorded 2 times as agent.cancel → cancelled'),
      'wakeup w1 started 2 sessions',
    ]);
  });

  it('one fact on the event stream under two event ids (a republish that lost its id)', async () => {
    const pub = new EventPublisher(nc);
    const scope = { workspace_id: randomUUID(), task_id: randomUUID(), session_id: randomUUID() };
    const data = { execution_id: randomUUID(), turn_id: randomUUID(), stop_reason: 'end_turn' };
    const first = buildEvent('turn.completed', scope, data);
    await pub.publish(first);
    await pub.publish(first); // the same event again (an outbox or journal retry) is not a second fact
    expect(await named('effect_applied_twice')).toEqual([]);
    await pub.publish(buildEvent('turn.completed', scope, data));
    expect(await named('effect_applied_twice')).toEqual([expect.stringContaining(`turn.completed of turn ${data.turn_id} reported under 2 event ids`)]);
  });
});

describe('every control action has its audit row', () => {
  it('a session stopped by an operator that no stop row names', async () => {
    const t = await task();
    const ok = await session(t, 'CANCELLED', 'stopped_by_operator');
    await audit(t, 'task.stop', 'stopped', { sessions: [ok] });
    expect(await named('control_action_unaudited')).toEqual([]);
    const bad = await session(t, 'CANCELLED', 'stopped_by_parent_task');
    expect(await named('control_action_unaudited')).toEqual([expect.stringContaining(`session ${bad} of task ${t.id} is CANCELLED (stopped_by_parent_task)`)]);
  });

  it('a cancelled turn that no cancel or interrupt accounts for', async () => {
    const t = await task();
    const s = await session(t, 'COMPLETED');
    const at = new Date(Date.now() - 60_000);
    const [byCancel, byInterrupt, unaccounted] = [randomUUID(), randomUUID(), randomUUID()];
    for (const id of [byCancel, byInterrupt, unaccounted]) {
      await sql`INSERT INTO orchestrator.turns (id, session_id, prompt, completed_at, stop_reason) VALUES (${id}, ${s}, 'p', ${id === byCancel ? at : new Date(Date.now() - 30_000)}, 'cancelled')`;
    }
    await audit(t, 'agent.cancel', 'cancelled', { session_id: s }, { created_at: at });
    await audit(t, 'mcp.message_task.interrupt', 'sent', { session_id: s, cancelled_turn_id: byInterrupt });
    expect(await named('control_action_unaudited')).toEqual([expect.stringContaining(`turn ${unaccounted} of session ${s}`)]);
    // A turn closed by its session's own end (a stop) is the stop's to account for.
    await sql`UPDATE orchestrator.turns SET completed_at = (SELECT completed_at FROM orchestrator.sessions WHERE id = ${s}) WHERE id = ${unaccounted}`;
    expect(await named('control_action_unaudited')).toEqual([]);
  });

  it('a hold member without the hold audit row, and a released hold without its release row', async () => {
    const t = await task();
    const hold = randomUUID();
    await sql`INSERT INTO orchestrator.tree_holds (id, workspace_id, root_task_id, mode, created_by) VALUES (${hold}, ${t.workspace_id}, ${t.id}, 'pause', 'operator:test')`;
    await sql`INSERT INTO orchestrator.tree_hold_members (hold_id, task_id, depth, task_status) VALUES (${hold}, ${t.id}, 0, 'TODO')`;
    expect(await named('control_action_unaudited')).toEqual([`hold ${hold}: member task ${t.id} has no tree.pause audit row`]);
    await audit(t, 'tree.pause', 'held', { hold_id: hold });
    expect(await named('control_action_unaudited')).toEqual([]);
    await sql`UPDATE orchestrator.tree_holds SET released_at = now() WHERE id = ${hold}`;
    expect(await named('control_action_unaudited')).toEqual([`hold ${hold}: member task ${t.id} has no tree.resume audit row`]);
  });
});

describe('no accepted request is lost without an error to its caller', () => {
  it('a stop answered `stopped` whose audit row or session state is not there', async () => {
    const t = await task();
    const s = await session(t, 'CANCELLED', 'stopped_by_operator');
    const stop = answered({
      kind: 'task.stop',
      task_id: t.id,
      request_id: 'req-stop',
      answer: { ok: true, body: { status: 'stopped', executions: [{ session_id: s, orphaned: false }] } },
    });
    expect(await named('accepted_request_lost', [stop])).toEqual([expect.stringContaining('no task.stop audit row with outcome stopped for request req-stop')]);
    await audit(t, 'task.stop', 'stopped', { sessions: [s] }, { request_id: 'req-stop' });
    expect(await named('accepted_request_lost', [stop])).toEqual([]);
    await sql`UPDATE orchestrator.sessions SET state = 'COMPLETED' WHERE id = ${s}`;
    expect(await named('accepted_request_lost', [stop])).toEqual([expect.stringContaining(`session ${s} it stopped is COMPLETED`)]);
  });

  it('a request refused with an error needs no effect; one never answered is lost', async () => {
    const t = await task();
    const refused = answered({ kind: 'task.stop', task_id: t.id, request_id: 'r', answer: { ok: false, error: '503 UNAVAILABLE' } });
    expect(await named('accepted_request_lost', [refused])).toEqual([]);
    const silent = answered({ kind: 'task.stop', task_id: t.id, request_id: 'r', answer: { ok: null, error: 'no answer' } });
    expect(await named('accepted_request_lost', [silent])).toEqual([expect.stringContaining('got no answer and no error')]);
  });

  it('a cancel answered success with no audit row in flight, or a row whose turn was not cancelled', async () => {
    const t = await task();
    const s = await session(t);
    const cancel = answered({ kind: 'session.cancel', task_id: t.id, session_id: s, answer: { ok: true, body: { success: true, session_id: s } } });
    expect(await named('accepted_request_lost', [cancel])).toEqual([expect.stringContaining('no agent.cancel audit row')]);
    // One transaction, as the orchestrator writes them: both stamps are its now(), with microseconds.
    await sql.begin(async (tx) => {
      await tx`INSERT INTO orchestrator.audit_log (id, task_id, workspace_id, action, actor, outcome, details, created_at)
               VALUES (${randomUUID()}, ${t.id}, ${t.workspace_id}, 'agent.cancel', 'operator:test', 'cancelled', ${tx.json({ session_id: s })}, now() - interval '500.123 milliseconds')`;
    });
    expect(await named('accepted_request_lost', [cancel])).toEqual([expect.stringContaining('no turn of the session was cancelled then')]);
    await sql`INSERT INTO orchestrator.turns (id, session_id, prompt, completed_at, stop_reason)
              SELECT ${randomUUID()}, ${s}, 'p', created_at, 'cancelled' FROM orchestrator.audit_log WHERE task_id = ${t.id} AND action = 'agent.cancel'`;
    expect(await named('accepted_request_lost', [cancel])).toEqual([]);
  });

  it('an interrupt answered `queued` whose message is gone, or is there twice', async () => {
    const t = await task();
    const s = await session(t, 'CREATED');
    const int = answered({
      kind: 'message.interrupt',
      task_id: t.id,
      prompt: 'steer-1',
      request_id: 'req-int',
      answer: { ok: true, body: { task_id: t.id, session_id: s, status: 'queued' } },
    });
    await audit(t, 'mcp.message_task.interrupt', 'queued', { session_id: s }, { request_id: 'req-int' });
    expect(await named('accepted_request_lost', [int])).toEqual([expect.stringContaining('the message is neither queued nor a turn')]);
    await sql`INSERT INTO orchestrator.queued_messages (id, task_id, session_id, prompt, queued_by) VALUES (${randomUUID()}, ${t.id}, ${s}, 'steer-1', 'agent')`;
    expect(await check([int])).toEqual([]);
    await sql`INSERT INTO orchestrator.turns (id, session_id, prompt) VALUES (${randomUUID()}, ${s}, 'steer-1')`;
    expect(await named('effect_applied_twice', [int])).toEqual([expect.stringContaining('"steer-1" is there 2 times')]);
  });
});
