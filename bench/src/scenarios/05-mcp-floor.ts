import { OrchMcp } from '@kandev/contracts';
import { createLogger, on, serveEndpoints, signAgentToken } from '@kandev/runtime';
import { spawnServiceProcess } from '@kandev/runtime/dev/launch';
import { connectMcp } from '@kandev/testkit';
import { serviceEntry } from '@kandev/testkit/paths';
import { startSdkNoopServer } from '../mcp-floor.js';
import type { Scenario } from '../scenario.js';
import { measure, summarize } from '../stats.js';

const SECRET = 'bench-secret-0123456789';
const TASK_ID = '00000000-0000-4000-8000-000000000001';

/**
 * The MCP floor: the SDK's own stateless Streamable HTTP server answering a no-op tool
 * to the SDK client (its own process, JSON responses like ours). Not our service, so it does not move
 * when our MCP handling gets faster; stop_task_kandev is compared with it (plus a NATS round trip and
 * a PostgreSQL commit). Beside it, the kandev mcp service (its own process) answering the same client:
 * `tools/list` (no backend) and `whoami_kandev` through NATS to a responder that answers at once.
 */
const scenario: Scenario = {
  name: 'MCP floor and the kandev MCP service',
  async run(ctx) {
    const sdk = await startSdkNoopServer();
    ctx.defer(() => sdk.stop());
    const floorClient = await connectMcp(sdk.url, 'unused');
    ctx.defer(() => floorClient.close());

    // An orchestrator that answers whoami at once: what is left is the MCP service and one NATS hop.
    const nc = await ctx.connect('bench-fake-orchestrator');
    const now = new Date().toISOString();
    const task = {
      id: TASK_ID,
      workspace_id: TASK_ID,
      parent_id: null,
      title: 'bench',
      description: null,
      status: 'TODO' as const,
      office: false,
      agent: null,
      archived_at: null,
      cancelled_at: null,
      created_at: now,
      updated_at: now,
    };
    const fake = await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'bench', queue: 'orchestrator', log: createLogger('bench', 'silent') }, [
      on(OrchMcp.whoami, async () => task),
    ]);
    ctx.defer(() => fake.stop());
    const mcp = await spawnServiceProcess({
      name: 'mcp',
      entry: serviceEntry('mcp'),
      // The agent rate off: this measures the call's path back to back, not the limit (the
      // budget bench measures the limiter's cost).
      env: { ...process.env, NATS_URL: ctx.natsUrl, MCP_PORT: '0', LOG_LEVEL: 'warn', KANDEV_JWT_SECRET: SECRET, KANDEV_AGENT_RATE: '0' },
    });
    ctx.defer(() => mcp.stop());
    const client = await connectMcp(mcp.urls.mcp!, await signAgentToken(SECRET, { task_id: TASK_ID }));
    ctx.defer(() => client.close());

    const floor = await measure(() => floorClient.callTool({ name: 'noop', arguments: {} }), ctx);
    const list = await measure(() => client.listTools(), ctx);
    const call = await measure(async () => {
      const r = await client.callTool({ name: 'whoami_kandev', arguments: {} });
      if (r.isError) throw new Error(`whoami failed: ${JSON.stringify(r.content)}`);
    }, ctx);
    // The same call after 250 ms of quiet each time, as the 1-caller stops are paced (12-stop-task-mcp):
    // what waking the idle processes (and vCPUs) adds to a chain that was not running hot.
    const paced: number[] = [];
    if (ctx.round === 1) {
      for (let i = 0; i < 40; i++) {
        await new Promise((r) => setTimeout(r, 250));
        const t = performance.now();
        await floorClient.callTool({ name: 'noop', arguments: {} });
        paced.push(performance.now() - t);
      }
    }
    return [
      ...(paced.length
        ? [
            {
              id: 'floor.mcp.sdk_noop.paced',
              label: 'the same no-op call, each after 250 ms of quiet (40 calls, first round only)',
              stats: summarize(paced),
              baseline: 'floor.mcp.sdk_noop',
            },
          ]
        : []),
      {
        id: 'floor.mcp.sdk_noop',
        label: "MCP SDK's stateless Streamable HTTP server (own process) answering a no-op tools/call to the SDK client",
        stats: floor,
      },
      {
        id: 'mcp.kandev.tools_list',
        label: 'kandev mcp service (own process): tools/list from the SDK client (token check, no backend)',
        stats: list,
        baseline: 'floor.mcp.sdk_noop',
      },
      {
        id: 'mcp.kandev.whoami',
        label: 'kandev mcp service: tools/call whoami_kandev, one NATS round trip to a responder that answers at once',
        stats: call,
        baseline: 'floor.mcp.sdk_noop',
      },
    ];
  },
};
export default scenario;
