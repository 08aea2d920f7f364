import { BaseEnv } from '@kandev/runtime';
import { z } from 'zod';

export const OrchestratorEnv = BaseEnv.extend({
  /** Bound of each session's message queue. */
  QUEUE_LIMIT: z.coerce.number().int().positive().default(10),
  /** How long a launch may take (agentctl + agent start) before the session start fails. */
  LAUNCH_TIMEOUT_MS: z.coerce.number().int().positive().default(20_000),
  /** Bound on an agent.cancel round trip (lifecycle's own cancel timeout + margin). */
  CANCEL_REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(8_000),
  DEFAULT_AGENT: z.string().default('scripted-acp'),
  /** Interval of the reconciler that re-sends stops for cancelled sessions whose process lives on. */
  RECONCILE_INTERVAL_MS: z.coerce.number().int().positive().default(5_000),
  /**
   * How long the registry may say an execution is idle (its turn over) while the orchestrator still
   * has the turn open, before the reconciler closes the turn itself: its turn.completed was lost.
   */
  TURN_OUTCOME_GRACE_MS: z.coerce.number().int().nonnegative().default(15_000),
});
export type OrchestratorEnv = z.infer<typeof OrchestratorEnv>;
