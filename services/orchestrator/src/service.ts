import { fileURLToPath } from 'node:url';
import { consumeEvents, RegistryReader, type ServiceDefinition, type ServiceRuntime } from '@kandev/runtime';
import { clarificationEndpoints } from './endpoints/clarifications.js';
import { lifecycleEndpoints } from './endpoints/lifecycle.js';
import { mcpEndpoints } from './endpoints/mcp.js';
import { operatorEndpoints } from './endpoints/operator.js';
import { permissionEndpoints } from './endpoints/permissions.js';
import { treeEndpoints } from './endpoints/tree.js';
import { OrchestratorEnv } from './env.js';
import type { OrchRuntime } from './flows/context.js';
import { LIFECYCLE_CONSUMER, LIFECYCLE_EVENT_TYPES, onLifecycleEvent } from './flows/lifecycle-events.js';
import { startReconciler } from './flows/reconcile.js';
import { TeardownYield } from './flows/teardown-yield.js';

/** Tasks, sessions, turns, the message queue; authorization; stop, interrupt and cancel orchestration; launch fences. */
export const orchestratorService: ServiceDefinition<typeof OrchestratorEnv> = {
  name: 'orchestrator',
  env: OrchestratorEnv,
  schema: 'orchestrator',
  migrationsDir: fileURLToPath(new URL('../migrations', import.meta.url)),
  async start(runtime) {
    const rt: OrchRuntime = Object.assign(runtime as ServiceRuntime<OrchestratorEnv>, {
      registry: await RegistryReader.bind(runtime.nc, runtime.log),
      teardownYield: new TeardownYield(runtime.env.TEARDOWN_YIELD_MS),
    });
    rt.onStop(() => rt.teardownYield.close());
    await rt.serve([...operatorEndpoints(rt), ...mcpEndpoints(rt), ...lifecycleEndpoints(rt), ...treeEndpoints(rt), ...clarificationEndpoints(rt), ...permissionEndpoints(rt)]);
    const consumer = await consumeEvents(rt.nc, { durable: LIFECYCLE_CONSUMER, types: LIFECYCLE_EVENT_TYPES, log: rt.log }, (ev) => onLifecycleEvent(rt, ev));
    rt.onStop(() => consumer.stop());
    rt.onStop(startReconciler(rt));
  },
};
