import type { EventEnvelope } from '@kandev/contracts';
import { processOnce, type EventScope, type Tx } from '@kandev/runtime';
import type { TranscriptCaps, TranscriptInput } from '../domain/transcript.js';
import { appendTranscriptItem } from '../store/transcript.js';
import type { Emit, OrchRuntime } from './context.js';

/** The durable consumer that writes what agents say into transcripts (one per service; replicas share it). */
export const TRANSCRIPT_CONSUMER = 'orchestrator-transcript';
/** What it consumes: every `kandev.evt.agent.*` event lifecycle relays from agentctl. */
export const TRANSCRIPT_EVENT_TYPES = ['agent.message', 'agent.tool_call'] as const;
export const TRANSCRIPT_FILTER_SUBJECT = 'kandev.evt.agent.>';

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
export async function recordTranscript(
  rt: OrchRuntime,
  tx: Tx,
  emit: Emit,
  scope: EventScope & { session_id: string },
  input: TranscriptInput,
): Promise<void> {
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
 * One agent event into its session's transcript, exactly once (B-5): the append and the event's
 * inbox row commit together, so a redelivered chunk finds its id and appends nothing (a chunk
 * appended twice would repeat text inside a coalesced item, where no later read could tell).
 */
export async function onAgentEvent(rt: OrchRuntime, ev: EventEnvelope): Promise<void> {
  const input = transcriptInputOf(ev);
  if (!input || !ev.session_id) return;
  const scope = { workspace_id: ev.workspace_id, task_id: ev.task_id ?? null, session_id: ev.session_id };
  const staged: EventEnvelope[] = [];
  await processOnce(rt.sql, TRANSCRIPT_CONSUMER, ev.id, async (tx) => {
    const writes = await appendTranscriptItem(tx, { ...input, session_id: scope.session_id }, transcriptCaps(rt));
    for (const w of writes) staged.push(await rt.outbox.add(tx, 'session.message', scope, w));
  });
  await rt.outbox.flush(staged);
}
