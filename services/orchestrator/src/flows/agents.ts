import { Life, validationError } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import type { CallContext, OrchRuntime } from './context.js';

interface Snapshot {
  agents: ReadonlySet<string>;
  at: number;
}
const snapshots = new WeakMap<OrchRuntime, Snapshot>();
/** The catalogue request in flight, shared: a burst of starts on a cold cache asks lifecycle once, not once per start. */
const inFlight = new WeakMap<OrchRuntime, Promise<Snapshot>>();

function fetchCatalogue(rt: OrchRuntime, call: CallContext): Promise<Snapshot> {
  const pending = inFlight.get(rt);
  if (pending) return pending;
  const fetched = request(rt.nc, Life.agents, {}, { requestId: call.requestId })
    .then(({ agents }) => {
      const snap = { agents: new Set(agents), at: Date.now() };
      snapshots.set(rt, snap);
      return snap;
    })
    .finally(() => inFlight.delete(rt));
  inFlight.set(rt, fetched);
  return fetched;
}

/**
 * Validation before effects: an agent the lifecycle deployment cannot launch is refused before
 * any session or status is written. A known name is served from a short-lived snapshot (one NATS
 * round trip per AGENT_CATALOGUE_TTL_MS, not per start); an unknown one is always re-asked, so an
 * agent added to the catalogue is usable at once. Lifecycle being unreachable is UNAVAILABLE,
 * again before any write.
 */
export async function assertKnownAgent(rt: OrchRuntime, call: CallContext, agent: string): Promise<void> {
  const cached = snapshots.get(rt);
  if (cached && Date.now() - cached.at < rt.env.AGENT_CATALOGUE_TTL_MS && cached.agents.has(agent)) return;
  const fresh = await fetchCatalogue(rt, call);
  if (!fresh.agents.has(agent)) {
    throw validationError(`unknown agent ${JSON.stringify(agent.slice(0, 100))}; known: ${[...fresh.agents].join(', ')}`, { field: 'agent' });
  }
}
