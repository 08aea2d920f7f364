import { BaseEnv } from '@kandev/runtime';
import { z } from 'zod';

export const McpEnv = BaseEnv.extend({
  /** Port of the MCP Streamable HTTP endpoint (`/mcp`); 0 = any free port. */
  MCP_PORT: z.coerce.number().int().min(0).max(65535).default(8090),
  MCP_HOST: z.string().default('127.0.0.1'),
  /**
   * The deadline of a tool call. It travels with the request (`kandev-timeout-ms`) and every service
   * behind waits only for what remains. It must leave room for the slowest legitimate answer: an
   * interrupt waits for the agent's cancel acknowledgement, message/create may launch an agent.
   */
  MCP_TOOL_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  /**
   * Origins allowed to call /mcp (comma list of exact `scheme://host[:port]`; empty = none). Unset:
   * the loopback origins of MCP_PORT only. A request with any other `Origin` is refused (403): DNS
   * rebinding, SPEC R-9.4 (src/domain/origin.ts).
   */
  MCP_ALLOWED_ORIGINS: z.string().optional(),
  /** `Host` values allowed (comma list; `name` = any port, `name:port`). Unset: loopback names when MCP_HOST is loopback, else unchecked. */
  MCP_ALLOWED_HOSTS: z.string().optional(),
  /**
   * How long a token's execution, once seen live in the registry, is trusted without looking again:
   * the most a token outlives its execution (SPEC, src/execution-liveness.ts).
   */
  MCP_EXECUTION_CACHE_MS: z.coerce.number().int().nonnegative().default(2_000),
  /** MCP requests per second one agent token may make on average (0 = no limit); over it, 429 RATE_LIMITED with Retry-After. */
  KANDEV_AGENT_RATE: z.coerce.number().nonnegative().default(20),
  /** Requests one agent token may make at once (the window is KANDEV_AGENT_BURST / KANDEV_AGENT_RATE seconds); unset = 2 × the rate. */
  KANDEV_AGENT_BURST: z.coerce.number().int().positive().optional(),
  /** MCP replicas sharing the rate: each counts alone and allows its share (ADR 0065). */
  MCP_REPLICAS: z.coerce.number().int().positive().default(1),
});
export type McpEnv = z.infer<typeof McpEnv>;
