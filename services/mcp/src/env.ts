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
});
export type McpEnv = z.infer<typeof McpEnv>;
