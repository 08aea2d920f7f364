import { pingEndpoint } from '@kandev/contracts';
import { createLogger, on, request, serveEndpoints } from '@kandev/runtime';
import type { Scenario } from '../scenario.js';
import { measure } from '../stats.js';

/**
 * The same round trip through the runtime helpers every service uses: @nats-io/services endpoint
 * in a queue group, zod validation of request and reply on both sides, trace context and request
 * id headers, a span per side, the request-duration histogram.
 */
const scenario: Scenario = {
  name: 'runtime request/reply helper',
  async run(ctx) {
    const server = await ctx.connect('bench-helper-responder');
    const client = await ctx.connect('bench-helper-requester');
    const ping = pingEndpoint('bench');
    const svc = await serveEndpoints(server, { service: 'bench', instanceId: 'bench-1', queue: 'bench', log: createLogger('bench', 'silent') }, [
      on(ping, async () => ({ service: 'bench', instance_id: 'bench-1' })),
    ]);
    ctx.defer(() => svc.stop());
    await server.flush();
    const stats = await measure(() => request(client, ping, {}, { timeoutMs: 5_000 }), ctx);
    return [
      {
        id: 'nats.request.helper',
        label: 'runtime `request` → `serveEndpoints` + `on` (ping contract)',
        stats,
        baseline: 'nats.request.bare',
      },
    ];
  },
};
export default scenario;
