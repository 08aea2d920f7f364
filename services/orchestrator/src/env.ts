import { BaseEnv } from '@kandev/runtime';
import { z } from 'zod';

export const OrchestratorEnv = BaseEnv.extend({
  /** Bound of each session's message queue. */
  QUEUE_LIMIT: z.coerce.number().int().positive().default(10),
  DEFAULT_AGENT: z.string().default('scripted-acp'),
  /** Interval of the reconciler that re-sends stops for cancelled sessions whose process lives on. */
  RECONCILE_INTERVAL_MS: z.coerce.number().int().positive().default(5_000),
});
export type OrchestratorEnv = z.infer<typeof OrchestratorEnv>;
