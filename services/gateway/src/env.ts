import { BaseEnv } from '@kandev/runtime';
import { z } from 'zod';

export const GatewayEnv = BaseEnv.extend({
  /** Port of the HTTP API, /ws and the console; 0 = any free port. */
  GATEWAY_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  GATEWAY_HOST: z.string().min(1).default('127.0.0.1'),
  /** Static files of the operator console; unset = services/gateway/console when it exists. */
  CONSOLE_DIR: z.string().min(1).optional(),
});
export type GatewayEnv = z.infer<typeof GatewayEnv>;
