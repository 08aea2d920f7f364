import type { ServiceDefinition } from '@kandev/runtime';
import { McpEnv } from './env.js';
import { startMcpHttp } from './http.js';

/**
 * The MCP server agents talk to. It owns no data: it verifies the
 * agent's token, picks the tool set of the token's mode, and turns each tool call into a typed
 * NATS request to the orchestrator with the calling task taken from the token.
 */
export const mcpService: ServiceDefinition<typeof McpEnv> = {
  name: 'mcp',
  env: McpEnv,
  publishesEvents: false,
  async start(rt) {
    const http = await startMcpHttp({
      host: rt.env.MCP_HOST,
      port: rt.env.MCP_PORT,
      jwtSecret: rt.env.KANDEV_JWT_SECRET,
      requestTimeoutMs: rt.env.MCP_TOOL_TIMEOUT_MS,
      nc: rt.nc,
      log: rt.log,
    });
    rt.onStop(() => http.close());
    return { urls: { mcp: http.url } };
  },
};
