import { BaseEnv } from '@kandev/runtime';
import { z } from 'zod';

export const HoldsEnv = BaseEnv.extend({
  /** How often the wakeup dispatcher looks for queued wakeups (a new wakeup also wakes it at once). */
  WAKEUP_POLL_MS: z.coerce.number().int().positive().default(500),
  /** Wakeups claimed per dispatcher round, launched concurrently. */
  WAKEUP_BATCH: z.coerce.number().int().positive().default(20),
  /** How long one launch may take (the orchestrator's launch plus margin). */
  WAKEUP_LAUNCH_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  /**
   * A claim not renewed for this long (its dispatcher died or froze; a live one renews its claims
   * three times per period while their launches run) goes back to the queue; the launch is keyed,
   * so a retry cannot double it.
   */
  WAKEUP_CLAIM_TIMEOUT_MS: z.coerce.number().int().positive().default(10_000),
  /** Launch attempts before a wakeup is finished as launch_failed. */
  WAKEUP_MAX_ATTEMPTS: z.coerce.number().int().positive().default(3),
  /** How often every replica looks for budget crossings not yet acted on (B-8; docs/operations.md "Budgets"). */
  BUDGET_SWEEP_MS: z.coerce.number().int().positive().default(5_000),
  /** A crossing still pending this long was lost with its instance (or its call failed): the sweeper acts on it. */
  BUDGET_CROSSING_RETRY_MS: z.coerce.number().int().positive().default(10_000),
});
export type HoldsEnv = z.infer<typeof HoldsEnv>;
