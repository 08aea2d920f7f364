import { Life, validationError } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import type { CallContext, OrchRuntime } from './context.js';

interface Snapshot {
  agents: ReadonlySet<string>;
  at: number;
}
const snapshots = new WeakMap<OrchRuntime, Snapshot>();

async function fetchCatalogue(rt: OrchRuntime, call: CallContext): Promise<Snapshot> {
  const { agents } = await request(rt.nc, Life.agents, {}, { requestId: call.requestId });
  const snap = { agents: new Set(agents), at: Date.now() };
  snapshots.set(rt, snap);
  return snap;
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
