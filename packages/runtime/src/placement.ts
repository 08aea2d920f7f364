import { JetStreamApiError } from '@nats-io/jetstream';
import type { Logger } from './log.js';

/** JetStream's "no suitable peers for placement" (JSClusterNoPeersErr): a number, not the server's wording. */
export const JS_NO_SUITABLE_PEERS = 10005;

/** How long a starting service waits for JetStream to place a replicated stream or bucket. */
export const PLACEMENT_WAIT_MS = 30_000;

/** Between two attempts: short beside a cluster's forming, a few hundred asks within the wait. */
const PLACEMENT_RETRY_MS = 250;

/**
 * Creates a stream or bucket (`create`), asking again while JetStream answers "no suitable peers for
 * placement", for at most `waitMs`. A forming cluster answers so between electing its meta leader (a
 * quorum is enough) and hearing from its last peer, so services started beside it (a Kubernetes
 * rollout, a test cluster) would otherwise die at start on a passing state. A cluster with fewer
 * nodes than the replicas answers so for ever: the last answer is thrown once the wait is over.
 */
export async function whenPlaceable<T>(create: () => Promise<T>, opts: { what: string; log?: Logger | undefined; waitMs?: number | undefined }): Promise<T> {
  const until = Date.now() + (opts.waitMs ?? PLACEMENT_WAIT_MS);
  for (let attempt = 1; ; attempt++) {
    try {
      return await create();
    } catch (e) {
      if (!(e instanceof JetStreamApiError) || e.code !== JS_NO_SUITABLE_PEERS || Date.now() >= until) throw e;
      if (attempt === 1) opts.log?.warn({ what: opts.what, err: e.message }, 'JetStream cannot place it yet (a cluster still forming?); asking again');
      await new Promise((r) => setTimeout(r, PLACEMENT_RETRY_MS));
    }
  }
}
