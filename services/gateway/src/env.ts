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
  /** API requests per second one operator token may make on average (0 = no limit); over it, 429 RATE_LIMITED with Retry-After. */
  KANDEV_OPERATOR_RATE: z.coerce.number().nonnegative().default(50),
  /** Requests one operator token may make at once (the window is KANDEV_OPERATOR_BURST / KANDEV_OPERATOR_RATE seconds); unset = 5 × the rate. */
  KANDEV_OPERATOR_BURST: z.coerce.number().int().positive().optional(),
  /** Gateway replicas sharing the rate: each counts alone and allows its share (ADR 0065). */
  GATEWAY_REPLICAS: z.coerce.number().int().positive().default(1),
});
export type GatewayEnv = z.infer<typeof GatewayEnv>;
