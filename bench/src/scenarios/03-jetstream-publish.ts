import { randomUUID } from 'node:crypto';
import { buildEvent, ensureEventStream, EventPublisher } from '@kandev/runtime';
import type { EventEnvelope } from '@kandev/contracts';
import type { Scenario } from '../scenario.js';
import { measure } from '../stats.js';

/** An event on KANDEV_EVENTS through the runtime publisher, waiting for the stream's ack. */
const scenario: Scenario = {
  name: 'JetStream publish + ack',
  async run(ctx) {
    const nc = await ctx.connect('bench-js-publisher');
    await ensureEventStream(nc);
    const publisher = new EventPublisher(nc);
    // Built up front so the timing holds the publish alone; each has its own id = Nats-Msg-Id.
    const workspace = randomUUID();
    const events: EventEnvelope[] = Array.from(
      { length: ctx.warmup + ctx.iterations },
      () =>
        buildEvent('turn.started', { workspace_id: workspace, task_id: randomUUID() }, { execution_id: randomUUID(), turn_id: randomUUID() }) as EventEnvelope,
    );
    const stats = await measure((i) => publisher.publish(events[i]!), ctx);
    return [
      {
        id: 'jetstream.publish.ack',
        label: '`EventPublisher.publish` (unique msgID, file storage) until the ack',
        stats,
        baseline: 'nats.request.bare',
      },
    ];
  },
};
export default scenario;
