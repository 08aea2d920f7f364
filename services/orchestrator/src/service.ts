import { fileURLToPath } from 'node:url';
import {
  busIdentityOf,
  consumeEventBatches,
  consumeEvents,
  packageVersion,
  readOnScrape,
  RegistryReader,
  SERVICE_KEYS,
  type ServiceDefinition,
  type ServiceRuntime,
} from '@kandev/runtime';
import { budgetEndpoints } from './endpoints/budget.js';
import { clarificationEndpoints } from './endpoints/clarifications.js';
import { lifecycleEndpoints } from './endpoints/lifecycle.js';
import { mcpEndpoints } from './endpoints/mcp.js';
import { coordinationEndpoints } from './endpoints/coordination.js';
import { operatorEndpoints } from './endpoints/operator.js';
import { operatorExtraEndpoints } from './endpoints/operator-extras.js';
import { readEndpoints } from './endpoints/read.js';
import { permissionEndpoints } from './endpoints/permissions.js';
import { treeEndpoints } from './endpoints/tree.js';
import { OrchestratorEnv } from './env.js';
import type { OrchRuntime } from './flows/context.js';
import { LIFECYCLE_CONSUMER, LIFECYCLE_EVENT_TYPES, onLifecycleEvent } from './flows/lifecycle-events.js';
import { startReconciler } from './flows/reconcile.js';
import {
  onAgentEvents,
  TRANSCRIPT_BATCH,
  TRANSCRIPT_CONSUMER,
  TRANSCRIPT_EVENT_TYPES,
  TRANSCRIPT_FILTER_SUBJECT,
  transcriptGroup,
} from './flows/transcript.js';
import { TeardownYield } from './flows/teardown-yield.js';
import { auditBusRefusal } from './flows/bus-refusals.js';
import { pendingForPeople } from './store/pending.js';

/** Tasks, sessions, turns, the message queue; authorization; stop, interrupt and cancel orchestration; launch fences. */
export const orchestratorService: ServiceDefinition<typeof OrchestratorEnv> = {
  name: 'orchestrator',
  version: packageVersion(import.meta.url),
  env: OrchestratorEnv,
  schema: 'orchestrator',
  // Verifies the agent token mcp forwards with every kandev.orch.mcp.> request (flows/caller.ts).
  keys: SERVICE_KEYS.orchestrator,
  migrationsDir: fileURLToPath(new URL('../migrations', import.meta.url)),
  async start(runtime) {
    const rt: OrchRuntime = Object.assign(runtime as ServiceRuntime<OrchestratorEnv>, {
      registry: await RegistryReader.bind(runtime.nc, runtime.log),
      teardownYield: new TeardownYield(runtime.env.TEARDOWN_YIELD_MS),
    });
    rt.onStop(() => rt.teardownYield.close());
    // A request refused because its caller is not verified on the bus is audited on the task it named (ADR 0055).
    busIdentityOf(rt.nc)?.onRefused((r) => auditBusRefusal(rt.sql, r, rt.log));
    await rt.serve([
      ...operatorEndpoints(rt),
      ...operatorExtraEndpoints(rt),
      ...mcpEndpoints(rt),
      ...coordinationEndpoints(rt),
      ...lifecycleEndpoints(rt),
      ...treeEndpoints(rt),
      ...clarificationEndpoints(rt),
      ...readEndpoints(rt),
      ...permissionEndpoints(rt),
      ...budgetEndpoints(rt),
    ]);
    const consumer = await consumeEvents(rt.nc, { durable: LIFECYCLE_CONSUMER, types: LIFECYCLE_EVENT_TYPES, log: rt.log }, (ev) => onLifecycleEvent(rt, ev));
    rt.onStop(() => consumer.stop());
    // Transcripts have their own durable consumer: a chatty agent never delays turn ends.
    const transcript = await consumeEventBatches(
      rt.nc,
      {
        durable: TRANSCRIPT_CONSUMER,
        types: TRANSCRIPT_EVENT_TYPES,
        filterSubject: TRANSCRIPT_FILTER_SUBJECT,
        log: rt.log,
        maxBatch: TRANSCRIPT_BATCH,
        groupBy: transcriptGroup,
      },
      (evs) => onAgentEvents(rt, evs),
    );
    rt.onStop(() => transcript.stop());
    rt.onStop(startReconciler(rt));
    // Questions and permission requests waiting on people, read from the database when scraped:
    // the same deployment-wide number from every replica (kept per replica, it would sum wrong).
    // One read serves the four gauges of a scrape.
    let read: { at: number; value: ReturnType<typeof pendingForPeople> } | null = null;
    const pending = () => {
      if (!read || Date.now() - read.at > 1000) read = { at: Date.now(), value: pendingForPeople(rt.sql) };
      return read.value;
    };
    readOnScrape('kandev_pending_question_bundles', async () => (await pending()).questions.count);
    readOnScrape('kandev_pending_question_oldest_age_seconds', async () => (await pending()).questions.oldestAgeS);
    readOnScrape('kandev_pending_permission_requests', async () => (await pending()).permissions.count);
    readOnScrape('kandev_pending_permission_oldest_age_seconds', async () => (await pending()).permissions.oldestAgeS);
  },
};
