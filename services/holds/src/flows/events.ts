import type { EventEnvelope } from '@kandev/contracts';
import type { HoldsRuntime } from './context.js';
import { recordCostEvent } from './costs.js';
import { applyHold, releaseHold } from './wakeups.js';

export const HOLDS_CONSUMER = 'holds-events';
const SYSTEM = { type: 'system' as const, id: 'holds' };

/**
 * What the holds service learns from the event log. Each effect is idempotent (gates by hold id
 * with tombstones, costs by usage_event_id), so at-least-once delivery applies it once (B-5).
 */
export async function onEvent(rt: HoldsRuntime, ev: EventEnvelope): Promise<void> {
  switch (ev.type) {
    case 'tree_hold.created':
      await applyHold(rt, (ev as EventEnvelope<'tree_hold.created'>).data.hold);
      return;
    case 'tree_hold.released':
      await releaseHold(rt, (ev as EventEnvelope<'tree_hold.released'>).data.hold);
      return;
    case 'usage.recorded': {
      const { data } = ev as EventEnvelope<'usage.recorded'>;
      if (!ev.task_id) return;
      await recordCostEvent(rt, { requestId: ev.id }, SYSTEM, {
        task_id: ev.task_id,
        session_id: ev.session_id ?? null,
        usage_event_id: data.usage_event_id,
        model: data.model,
        cost_cents: data.cost_cents,
        tokens_in: data.tokens_in,
        tokens_cached_in: data.tokens_cached_in,
        tokens_out: data.tokens_out,
        ...(data.priced !== undefined ? { priced: data.priced } : {}),
      });
      return;
    }
    default:
      return;
  }
}
