import { BaseEnv } from '@kandev/runtime';
import { z } from 'zod';

export const GatewayEnv = BaseEnv.extend({
  /** Port of the HTTP API, /ws and the console; 0 = any free port. */
  GATEWAY_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  GATEWAY_HOST: z.string().min(1).default('127.0.0.1'),
  /** Static files of the operator console; unset = services/gateway/console when it exists. */
  CONSOLE_DIR: z.string().min(1).optional(),
  /**
   * The deadline of an API call or /ws action. It travels with the request (`kandev-timeout-ms`) and
   * every service behind waits only for what remains, so it is the one request timeout to set. It must
   * leave room for the slowest legitimate answer: a session start launches an agent (lifecycle's
   * LAUNCH_TIMEOUT_MS), a cancel waits for the agent's acknowledgement (CANCEL_TIMEOUT_MS).
   */
  GATEWAY_REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
});
export type GatewayEnv = z.infer<typeof GatewayEnv>;
