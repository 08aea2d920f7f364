import type { EventDataOf, EventEnvelope, EventType } from '@kandev/contracts';
import { buildEvent } from '@kandev/runtime';
import type { AgentctlLine } from '../agentctl/process.js';
import { turnCompleted, turnStarted } from '../domain/turns.js';
import type { LiveExecution } from '../live-execution.js';
import type { EventJournal } from '../store/event-journal.js';
import type { Executions } from './context.js';
import { permissionAsked, permissionResolved } from './permissions.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Recorded in the journal and published until acknowledged (ADR 0008); resolves once out, or once a first attempt failed. */
export async function emit<T extends EventType>(journal: EventJournal, x: LiveExecution, type: T, data: EventDataOf<T>): Promise<void> {
  try {
    await journal.record(buildEvent(type, x.scope, data) as EventEnvelope);
  } catch (e) {
    // The journal could not be written (disk full, state dir gone): the event is lost; say so loudly.
    x.log.error({ err: e, type }, 'event could not be journalled; it is lost');
  }
}

/**
 * Queue an event without waiting for JetStream: the journal records it at once and publishes in
 * the order of recording, retrying until acknowledged. The lines of an execution are handled in
 * order (LiveExecution.inOrder); waiting on each acknowledgement there held every later line, and
 * a cancel's reply, behind the disk sync and the round trips of the events before it.
 */
const queue = <T extends EventType>(journal: EventJournal, x: LiveExecution, type: T, data: EventDataOf<T>): void => void emit(journal, x, type, data);

/** One line agentctl wrote, as the events of the execution (run in order, see LiveExecution.inOrder). */
export async function relay(ctx: Executions, x: LiveExecution, ev: AgentctlLine): Promise<void> {
  const { journal } = ctx.deps;
  switch (ev.type) {
    case 'turn_started': {
      const step = turnStarted(x.turnView, ev.turn_id);
      if (x.applyTurn(step)) void x.persist();
      if (step.publish && UUID.test(ev.turn_id)) queue(journal, x, 'turn.started', { execution_id: x.id, turn_id: ev.turn_id });
      return;
    }
    case 'turn_completed':
      if (ev.stop_reason === 'error') x.log.warn({ turn_id: ev.turn_id, error: ev.error }, 'turn failed');
      return finishTurn(journal, x, ev.turn_id, ev.stop_reason);
    case 'agent_message':
      return queue(journal, x, 'agent.message', { execution_id: x.id, turn_id: UUID.test(ev.turn_id) ? ev.turn_id : null, text: ev.text });
    case 'tool_call':
      return queue(journal, x, 'agent.tool_call', {
        execution_id: x.id,
        turn_id: UUID.test(ev.turn_id) ? ev.turn_id : null,
        tool_call_id: ev.tool_call_id,
        phase: ev.phase,
        title: ev.title,
        kind: ev.kind,
        text: ev.text,
      });
    case 'usage':
      return queue(journal, x, 'usage.recorded', {
        execution_id: x.id,
        usage_event_id: ev.usage_event_id,
        model: ev.model ?? null,
        cost_cents: ev.cost_cents,
        tokens_in: ev.tokens_in,
        tokens_cached_in: ev.tokens_cached_in,
        tokens_out: ev.tokens_out,
        ...(ev.priced === undefined ? {} : { priced: ev.priced }),
      });
    case 'permission_requested':
      x.log.info({ permission_id: ev.permission_id, turn_id: ev.turn_id, event: ev.type, title: ev.title }, 'agent permission');
      return queue(journal, x, 'agent.permission_requested', permissionAsked(x, ev));
    case 'permission_resolved':
      x.log.info({ permission_id: ev.permission_id, turn_id: ev.turn_id, event: ev.type, outcome: ev.outcome }, 'agent permission');
      return queue(journal, x, 'agent.permission_resolved', permissionResolved(x, ev));
    case 'agent_exited':
      x.agentExit = { code: ev.code, signal: ev.signal };
      if (!x.teardown) {
        // agentctl may have stopped it itself (this instance was silent or gone, or agentctl was signalled).
        const reason = ev.stopped_by ? `agentctl_stopped_agent:${ev.stopped_by}` : 'agent_exited';
        x.log.warn({ exit_code: ev.code, signal: ev.signal, reason }, ev.stopped_by ? 'agentctl stopped the agent on its own' : 'agent exited on its own');
        void ctx.teardowns.teardown(x, { reason, graceMs: 0, orphaned: false });
      }
      return;
  }
}

/** The turn's end, learnt from agentctl's line or from the cancel reply, whichever comes first (once). */
export function finishTurn(journal: EventJournal, x: LiveExecution, turnId: string, stopReason: string): void {
  const step = turnCompleted(x.turnView, turnId);
  if (x.applyTurn(step)) void x.persist();
  if (!step.publish || !UUID.test(turnId)) return;
  // the orchestrator closes the turn and moves the session to WAITING_FOR_INPUT on
  // turn.completed or on the cancel reply, whichever it has first, and publishes
  // session.agent.cancelled with those writes, so a client that reads the session on that event
  // finds it so (the lifecycle cannot: its event would race the orchestrator's commit).
  queue(journal, x, 'turn.completed', { execution_id: x.id, turn_id: turnId, stop_reason: stopReason });
}
