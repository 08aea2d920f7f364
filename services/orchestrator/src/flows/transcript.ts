import { eventSubject, type EventEnvelope } from '@kandev/contracts';
import { recordOnce, type EventScope, type Tx } from '@kandev/runtime';
import type { TranscriptCaps, TranscriptInput, TranscriptPiece } from '../domain/transcript.js';
import { appendTranscriptItem, appendTranscriptRun } from '../store/transcript.js';
import { transact, type Emit, type OrchRuntime } from './context.js';

/** The durable consumer that writes what agents say into transcripts (one per service; replicas share it). */
export const TRANSCRIPT_CONSUMER = 'orchestrator-transcript';
/** What it consumes: every `kandev.evt.agent.*` event lifecycle relays from agentctl. */
export const TRANSCRIPT_EVENT_TYPES = ['agent.message', 'agent.tool_call'] as const;
export const TRANSCRIPT_FILTER_SUBJECT = eventSubject('agent.>');
/** The most events the consumer takes at once; one session's share of them is one transaction (ADR 0035). */
export const TRANSCRIPT_BATCH = 100;
/** What the consumer groups its batch by: one session's events are one run, in delivery order. */
export const transcriptGroup = (ev: EventEnvelope): string => ev.session_id ?? ev.id;

export const transcriptCaps = (rt: OrchRuntime): TranscriptCaps => ({
  itemBytes: rt.env.TRANSCRIPT_ITEM_BYTES,
  sessionBytes: rt.env.TRANSCRIPT_SESSION_BYTES,
  sessionItems: rt.env.TRANSCRIPT_SESSION_ITEMS,
});

/**
 * Append to a session's transcript inside the caller's transaction and stage one `session.message`
 * event per write (pushed on /ws once the transaction commits). The one way the orchestrator's
 * flows add an item: prompts (sessions.ts), and permission requests and questions.
 */
export async function recordTranscript(rt: OrchRuntime, tx: Tx, emit: Emit, scope: EventScope & { session_id: string }, input: TranscriptInput): Promise<void> {
  const writes = await appendTranscriptItem(tx, { ...input, session_id: scope.session_id }, transcriptCaps(rt));
  for (const w of writes) await emit('session.message', scope, w);
}

/** The transcript input an agent event carries, or null for an event that adds nothing. */
export function transcriptInputOf(ev: EventEnvelope): TranscriptInput | null {
  switch (ev.type) {
    case 'agent.message': {
      const d = (ev as EventEnvelope<'agent.message'>).data;
      return d.text === '' ? null : { turn_id: d.turn_id, role: 'agent', kind: 'agent_text', text: d.text };
    }
    case 'agent.tool_call': {
      const d = (ev as EventEnvelope<'agent.tool_call'>).data;
      const meta = { tool_call_id: d.tool_call_id, title: d.title, tool_kind: d.kind, ...(d.phase === 'started' ? {} : { status: d.phase }) };
      if (d.phase === 'started') return { turn_id: d.turn_id, role: 'agent', kind: 'tool_call', text: [d.title, d.text].filter((s) => s).join('\n'), meta };
      return { turn_id: d.turn_id, role: 'agent', kind: 'tool_result', text: d.text, meta };
    }
    default:
      return null;
  }
}

/**
 * A run of agent events into their sessions' transcripts, exactly once per event (B-5, ADR 0035):
 * per session one transaction records the run's ids in the inbox, appends what the new ones add
 * (consecutive chunks of a turn as one write) and stages the `session.message` events. A
 * redelivered chunk finds its id and appends nothing (a chunk appended twice would repeat text
 * inside a coalesced item, where no later read could tell). The consumer hands one session's run
 * at a time (transcriptGroup); events of several sessions are still kept apart here.
 */
export async function onAgentEvents(rt: OrchRuntime, evs: readonly EventEnvelope[]): Promise<void> {
  const runs = new Map<string, { scope: EventScope & { session_id: string }; pieces: TranscriptPiece[] }>();
  for (const ev of evs) {
    const input = transcriptInputOf(ev);
    if (!input || !ev.session_id) continue;
    let run = runs.get(ev.session_id);
    if (!run) runs.set(ev.session_id, (run = { scope: { workspace_id: ev.workspace_id, task_id: ev.task_id ?? null, session_id: ev.session_id }, pieces: [] }));
    run.pieces.push({ id: ev.id, input });
  }
  for (const { scope, pieces } of runs.values()) {
    await transact(rt, async (tx, emit) => {
      const fresh = await recordOnce(
        tx,
        TRANSCRIPT_CONSUMER,
        pieces.map((p) => p.id),
      );
      if (!fresh.size) return;
      const writes = await appendTranscriptRun(tx, scope.session_id, pieces, fresh, transcriptCaps(rt));
      for (const w of writes) await emit('session.message', scope, w);
    });
  }
}
