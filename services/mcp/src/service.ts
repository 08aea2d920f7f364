import { RegistryReader, SERVICE_KEYS, type ServiceDefinition, packageVersion } from '@kandev/runtime';
import { McpEnv } from './env.js';
import { ExecutionLiveness } from './execution-liveness.js';
import { startMcpHttp } from './http.js';
import { agentRateLimiter } from './rate-limit.js';

/**
 * The MCP server agents talk to. It owns no data: it verifies the
 * agent's token, picks the tool set of the token's mode, and turns each tool call into a typed
 * NATS request to the orchestrator with the calling task taken from the token.
 */
export const mcpService: ServiceDefinition<typeof McpEnv> = {
  name: 'mcp',
  version: packageVersion(import.meta.url),
  env: McpEnv,
  publishesEvents: false,
  // Agent tokens only (ADR 0020): an operator token is not a credential here.
  keys: SERVICE_KEYS.mcp,
  async start(rt) {
    // Bound on first use, and again after a failure: lifecycle creates the bucket, and may start after mcp.
    let registry: Promise<RegistryReader> | undefined;
    const bindRegistry = () =>
      (registry ??= RegistryReader.bind(rt.nc, rt.log).catch((e: unknown) => {
        registry = undefined;
        throw e;
      }));
    const http = await startMcpHttp({
      host: rt.env.MCP_HOST,
      port: rt.env.MCP_PORT,
      jwtSecret: rt.key('agent'),
      requestTimeoutMs: rt.env.MCP_TOOL_TIMEOUT_MS,
      nc: rt.nc,
      log: rt.log,
      instanceId: rt.instanceId,
      allowedOrigins: rt.env.MCP_ALLOWED_ORIGINS,
      allowedHosts: rt.env.MCP_ALLOWED_HOSTS,
      liveness: new ExecutionLiveness(bindRegistry, rt.env.MCP_EXECUTION_CACHE_MS),
      rateLimit: agentRateLimiter({
        rate: rt.env.KANDEV_AGENT_RATE,
        burst: rt.env.KANDEV_AGENT_BURST ?? Math.ceil(2 * rt.env.KANDEV_AGENT_RATE),
        replicas: rt.env.MCP_REPLICAS,
      }),
    });
    rt.onStop(() => http.close());
    return { urls: { mcp: http.url } };
  },
};
