import { BaseEnv } from '@kandev/runtime';
import { z } from 'zod';

export const GatewayEnv = BaseEnv.extend({
  /** Port of the HTTP API, /ws and the console; 0 = any free port. */
  GATEWAY_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  GATEWAY_HOST: z.string().min(1).default('127.0.0.1'),
  /** Static files of the operator console; unset = services/gateway/console when it exists. */
  CONSOLE_DIR: z.string().min(1).optional(),
  /**
   * How long an API call may wait for the backend. Above the orchestrator's own bounds: a session
   * start launches an agent (LAUNCH_TIMEOUT_MS), a cancel waits for the agent's acknowledgement.
   */
  GATEWAY_REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
});
export type GatewayEnv = z.infer<typeof GatewayEnv>;
