// "No event effect is applied twice" (B-5), checked on what the effects leave behind: the
// database (one snapshot) and the event stream every consumer reads.
import { Streams, TERMINAL_SESSION_STATES, type EventEnvelope, type EventType } from '@kandev/contracts';
import type { NatsConnection } from '@kandev/runtime';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type postgres from 'postgres';
import { at, type Violation } from './types.js';

type Tx = postgres.TransactionSql;
/** One envelope per event type, so a switch on `type` narrows `data`. */
type AnyEvent = { [T in EventType]: EventEnvelope<T> }[EventType];

/**
 * In the database:
 * - the cost rollup (holds.task_costs) equals the sum of its cost events: an event folded twice
 *   (a redelivered `usage.recorded`, a retried POST /cost-events) shows as a mismatch;
 * - a session has at most one open turn: a prompt or queued message dispatched twice opens two;
 * - one audit row per request, task, action and outcome: a request handled twice writes two;
 * - at most one session start per wakeup: a retried dispatch must find the session it started.
 */
export async function effectsInDatabase(tx: Tx): Promise<Violation[]> {
  const out: Violation[] = [];
  const costs = await tx<{ task_id: string; rollup: string; events: string }[]>`
    WITH agg AS (
      SELECT task_id, count(*) AS events, count(*) FILTER (WHERE NOT priced) AS unpriced, sum(cost_cents) AS cost,
             sum(tokens_in) AS tin, sum(tokens_cached_in) AS tcached, sum(tokens_out) AS tout
      FROM holds.cost_events GROUP BY task_id),
    both_sides AS (
      SELECT COALESCE(c.task_id, a.task_id) AS task_id,
             ARRAY[COALESCE(c.events, 0), COALESCE(c.unpriced_events, 0), COALESCE(c.cost_cents, 0), COALESCE(c.tokens_in, 0), COALESCE(c.tokens_cached_in, 0), COALESCE(c.tokens_out, 0)]::numeric[] AS rollup,
             ARRAY[COALESCE(a.events, 0), COALESCE(a.unpriced, 0), COALESCE(a.cost, 0), COALESCE(a.tin, 0), COALESCE(a.tcached, 0), COALESCE(a.tout, 0)]::numeric[] AS events
      FROM holds.task_costs c FULL JOIN agg a ON a.task_id = c.task_id)
    SELECT task_id, rollup::text, events::text FROM both_sides WHERE rollup <> events`;
  for (const c of costs) {
    out.push(
      at(
        'effect_applied_twice',
        `task ${c.task_id}: cost rollup [events, unpriced, cents, in, cached, out] ${c.rollup} but its cost events sum to ${c.events}`,
      ),
    );
  }
  const open = await tx<{ session_id: string; n: number }[]>`
    SELECT session_id, count(*)::int AS n FROM orchestrator.turns WHERE completed_at IS NULL GROUP BY session_id HAVING count(*) > 1`;
  for (const o of open) out.push(at('effect_applied_twice', `session ${o.session_id} has ${o.n} open turns`));
  const audits = await tx<{ request_id: string; task_id: string; action: string; outcome: string; n: number }[]>`
    SELECT request_id, task_id, action, outcome, count(*)::int AS n FROM orchestrator.audit_log
    WHERE request_id IS NOT NULL GROUP BY 1, 2, 3, 4 HAVING count(*) > 1`;
  for (const a of audits)
    out.push(at('effect_applied_twice', `request ${a.request_id} recorded ${a.n} times as ${a.action} → ${a.outcome} on task ${a.task_id}`));
  const wakeups = await tx<{ wakeup_id: string; n: number }[]>`
    SELECT details->>'wakeup_id' AS wakeup_id, count(*)::int AS n FROM orchestrator.audit_log
    WHERE action = 'session.start' AND details ? 'wakeup_id' GROUP BY 1 HAVING count(*) > 1`;
  for (const w of wakeups) out.push(at('effect_applied_twice', `wakeup ${w.wakeup_id} started ${w.n} sessions`));
  return out;
}

/** The one fact an event reports, for the events whose fact happens once; null for the others. */
function factOf(ev: AnyEvent): string | null {
  switch (ev.type) {
    case 'turn.completed':
    case 'turn.started':
      return `${ev.type} of turn ${ev.data.turn_id}`;
    case 'execution.stopped':
      return `${ev.type} of execution ${ev.data.execution_id}`;
    case 'usage.recorded':
      return `${ev.type} ${ev.data.usage_event_id}`;
    case 'task.created':
      return `${ev.type} ${ev.data.task?.id}`;
    case 'tree_hold.created':
    case 'tree_hold.released':
      return `${ev.type} ${ev.data.hold?.id}`;
    case 'session.state_changed':
      // A session ends once: a second terminal transition is an end applied twice.
      return TERMINAL_SESSION_STATES.includes(ev.data.to) ? `end of session ${ev.session_id}` : null;
    default:
      return null;
  }
}

/**
 * On the event stream: a fact that happens once is reported under one event id. Consumers apply
 * each event id once (their inbox), so the same fact under two ids would be applied twice. A
 * republished event keeps its id (outbox, lifecycle journal), so ids are counted, not messages.
 */
export async function effectsOnStream(nc: NatsConnection): Promise<Violation[]> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(Streams.events.name).catch(() => null);
  if (!info || info.state.messages === 0) return [];
  const last = info.state.last_seq;
  const consumer = await jetstream(nc).consumers.get(Streams.events.name);
  const ids = new Map<string, Set<string>>();
  const messages = await consumer.consume();
  try {
    for await (const m of messages) {
      const ev = m.json<AnyEvent>();
      const fact = factOf(ev);
      if (fact) ids.set(fact, (ids.get(fact) ?? new Set()).add(ev.id));
      if (m.seq >= last) break;
    }
  } finally {
    await messages.close();
  }
  return [...ids]
    .filter(([, s]) => s.size > 1)
    .map(([fact, s]) => at('effect_applied_twice', `${fact} reported under ${s.size} event ids (${[...s].join(', ')})`));
}
