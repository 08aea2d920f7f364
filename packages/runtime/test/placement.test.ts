import { jetstreamManager } from '@nats-io/jetstream';
import { Streams } from '@kandev/contracts';
import { natsLogin, startNatsCluster } from '@kandev/testkit';
import { pino } from 'pino';
import { expect, it } from 'vitest';
import { connectNats, ensureEventStream, JS_NO_SUITABLE_PEERS, PLACEMENT_WAIT_MS } from '../src/index.js';

it(
  'a stream with 3 replicas, asked for while the cluster is still forming, is created once its last node joins',
  async () => {
    const cluster = await startNatsCluster(3, { running: 2 });
    // As the orchestrator, which ensures the event stream at start-up (the cluster admits only the services' users).
    const nc = await connectNats({ url: cluster.url, name: 'placement-test', ...natsLogin(cluster, 'orchestrator') });
    try {
      // Without the wait, JetStream refuses: two of three nodes cannot hold three replicas.
      await expect(ensureEventStream(nc, { replicas: 3, placementWaitMs: 0 })).rejects.toMatchObject({ code: JS_NO_SUITABLE_PEERS });

      let refused!: () => void;
      const refusedOnce = new Promise<void>((r) => (refused = r));
      const log = pino({ level: 'warn' }, { write: (line: string) => (JSON.parse(line).what === `stream ${Streams.events.name}` ? refused() : undefined) });
      const created = ensureEventStream(nc, { replicas: 3, log });
      await Promise.race([refusedOnce, created]); // refused at least once and asking again (or failed: the test fails)
      await cluster.nodes[2]!.start();
      await created;
      const info = await (await jetstreamManager(nc)).streams.info(Streams.events.name);
      expect(info.config.num_replicas).toBe(3);
    } finally {
      await nc.close();
      await cluster.stop();
    }
  },
  PLACEMENT_WAIT_MS + 30_000,
);
