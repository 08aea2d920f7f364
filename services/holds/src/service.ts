import { fileURLToPath } from 'node:url';
import { consumeEvents, readOnScrape, type ServiceDefinition, packageVersion } from '@kandev/runtime';
import { holdsEndpoints } from './endpoints/holds.js';
import { HoldsEnv } from './env.js';
import type { HoldsRuntime } from './flows/context.js';
import { startBudgetSweeper } from './flows/budget.js';
import { startDispatcher } from './flows/dispatcher.js';
import { HOLDS_CONSUMER, onEvent } from './flows/events.js';
import { wakeupBacklog } from './store/wakeups.js';

/** The wakeup queue, its dispatcher and hold gate, cost events and tree cost summaries. */
export const holdsService: ServiceDefinition<typeof HoldsEnv> = {
  name: 'holds',
  version: packageVersion(import.meta.url),
  env: HoldsEnv,
  schema: 'holds',
  migrationsDir: fileURLToPath(new URL('../migrations', import.meta.url)),
  async start(runtime) {
    const rt = runtime as HoldsRuntime;
    const dispatcher = startDispatcher(rt);
    rt.onStop(() => dispatcher.stop());
    await rt.serve(holdsEndpoints(rt, dispatcher.kick));
    rt.onStop(startBudgetSweeper(rt));
    const consumer = await consumeEvents(
      rt.nc,
      { durable: HOLDS_CONSUMER, types: ['tree_hold.created', 'tree_hold.released', 'usage.recorded'], log: rt.log },
      (ev) => onEvent(rt, ev),
    );
    rt.onStop(() => consumer.stop());
    // Read when Prometheus scrapes, through the queued-wakeups index: no timer of its own.
    readOnScrape('kandev_wakeup_backlog', async () => (await wakeupBacklog(rt.sql)).queued);
    readOnScrape('kandev_wakeup_oldest_age_seconds', async () => (await wakeupBacklog(rt.sql)).oldestAgeS);
  },
};
