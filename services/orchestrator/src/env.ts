import { BaseEnv } from '@kandev/runtime';
import { z } from 'zod';

export const OrchestratorEnv = BaseEnv.extend({
  /** Bound of each session's message queue. */
  QUEUE_LIMIT: z.coerce.number().int().positive().max(100).default(10),
  DEFAULT_AGENT: z.string().default('scripted-acp'),
  /** Interval of the reconciler that re-sends stops for cancelled sessions whose process lives on. */
  RECONCILE_INTERVAL_MS: z.coerce.number().int().positive().default(5_000),
  /**
   * How long an ask_user_questions call waits before its still-pending questions expire. Below the
   * MCP SDK client's default request timeout (60 s), so a stock client gets the typed `expired`
   * result instead of its own timeout error; raise it where agents' MCP clients wait longer
   * (docs/clarifications.md).
   */
  CLARIFICATION_TIMEOUT_MS: z.coerce.number().int().positive().default(50_000),
  /** Lease of a waiting tool call on its bundle; the mcp instance renews it every third of this (ADR 0007). */
  CLARIFICATION_LEASE_MS: z.coerce.number().int().min(300).default(15_000),
  /**
   * A task IN_PROGRESS with no active session for this long (a launch that failed or was lost, a
   * restart) is moved to REVIEW by the reconciler, so it never looks busy with nothing running.
   * Never a member of an active hold, nor a task a restore left IN_PROGRESS (ADR 0025).
   */
  STALLED_TASK_AFTER_MS: z.coerce.number().int().positive().default(60_000),
  /**
   * A session STARTING with no execution for this long lost its launch (its start died with its
   * replica) and is FAILED by the reconciler. Longer than any start can legitimately wait: a caller's
   * deadline (30 s at the edges), lifecycle's launch queue and launch timeout.
   */
  LAUNCH_LOST_AFTER_MS: z.coerce.number().int().positive().default(120_000),
  /** How long a known agent name is trusted without asking lifecycle again. */
  AGENT_CATALOGUE_TTL_MS: z.coerce.number().int().nonnegative().default(10_000),
  /**
   * How long an idempotency key (Idempotency-Key of POST /tasks, /tasks/:id/sessions,
   * /sessions/:id/prompt; idempotency_key of the MCP tools) is kept: a retry within this answers the
   * first result. The reconciler purges older keys (docs/operations.md).
   */
  IDEMPOTENCY_KEEP_MS: z.coerce
    .number()
    .int()
    .positive()
    .default(24 * 3_600_000),
  /** An idempotency key whose first request never finished (a crash) may be taken over after this long. */
  IDEMPOTENCY_STALE_MS: z.coerce.number().int().positive().default(300_000),
  /**
   * How long the registry may say an execution is idle (its turn over) while the orchestrator still
   * has the turn open, before the reconciler closes the turn itself: its turn.completed was lost.
   */
  TURN_OUTCOME_GRACE_MS: z.coerce.number().int().nonnegative().default(15_000),
  /**
   * The longest a turn cancel (operator cancel, message interrupt) waits for the owner lifecycle
   * instance while it holds the session's guard: lifecycle answers within its CANCEL_TIMEOUT_MS
   * (5 s) + 2 s, so this is that with headroom. Without it an instance that dies mid-cancel would
   * hold the guard — and every stop, event and repair of the session — for the caller's whole deadline.
   */
  LIFECYCLE_CANCEL_WAIT_MS: z.coerce.number().int().positive().default(10_000),
  /**
   * The same bound for handing a turn's prompt to the owner lifecycle instance inside the session's
   * guard (a message delivered, an interrupt's new turn, a drained queue): lifecycle answers once
   * agentctl has taken the prompt, in milliseconds. An owner that died after a cancel's answer and
   * before the prompt's would otherwise hold the guard for the caller's whole deadline.
   */
  LIFECYCLE_PROMPT_WAIT_MS: z.coerce.number().int().positive().default(10_000),
  /**
   * The longest a stop's teardown waits, after its answer, for the stop decisions still in flight
   * on this instance (ADR 0012): on a burst of stops the answers come first. Part of R-6.3's small
   * bound between CANCELLED and the process's SIGTERM; 0 sends every teardown at once.
   */
  TEARDOWN_YIELD_MS: z.coerce.number().int().nonnegative().max(2_000).default(500),
  /** Transcript caps (R-8.2, docs/limits.md): bytes of one item's text, of a session's items, and items per session. */
  TRANSCRIPT_ITEM_BYTES: z.coerce
    .number()
    .int()
    .min(1_024)
    .default(64 * 1024),
  TRANSCRIPT_SESSION_BYTES: z.coerce
    .number()
    .int()
    .min(1_024)
    .default(5 * 1024 * 1024),
  TRANSCRIPT_SESSION_ITEMS: z.coerce.number().int().min(2).default(10_000),
  /** Root of the agents' task directories (R-9.1), to check a task's `working_dir` against; unset = `<KANDEV_STATE_DIR>/work` (as lifecycle). */
  KANDEV_WORK_DIR: z.string().min(1).optional(),
  KANDEV_STATE_DIR: z.string().min(1).default('.kandev'),
  // limits an agent cannot exceed (docs/operations.md "Limits and rates"); each refusal is CONFLICT with details.limit.
  /** Children (not archived) one task may create through create_task_kandev. 0 = no cap. */
  KANDEV_MAX_CHILDREN: z.coerce.number().int().nonnegative().default(100),
  /** Levels of a task tree an agent may build (a root is level 1). 0 = no cap. */
  KANDEV_MAX_DEPTH: z.coerce.number().int().nonnegative().default(10),
  /** Active sessions of one workspace; one more start (operator, agent, wakeup) is refused. 0 = no cap. */
  KANDEV_MAX_LIVE_SESSIONS_PER_WORKSPACE: z.coerce.number().int().nonnegative().default(200),
  /** Pending ask_user_questions bundles of one session; one more is refused. 0 = no cap. */
  KANDEV_MAX_PENDING_QUESTIONS_PER_SESSION: z.coerce.number().int().nonnegative().default(5),
});
export type OrchestratorEnv = z.infer<typeof OrchestratorEnv>;
