import { z } from 'zod';

export const TaskStatus = z.enum(['TODO', 'SCHEDULING', 'IN_PROGRESS', 'REVIEW', 'BLOCKED', 'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED']);
export type TaskStatus = z.infer<typeof TaskStatus>;

export const SessionState = z.enum(['CREATED', 'STARTING', 'RUNNING', 'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED']);
export type SessionState = z.infer<typeof SessionState>;

/** Active = a database query treats it as live work. */
export const ACTIVE_SESSION_STATES: readonly SessionState[] = ['CREATED', 'STARTING', 'RUNNING', 'WAITING_FOR_INPUT'];
/** Working = a turn may be in flight. */
export const WORKING_SESSION_STATES: readonly SessionState[] = ['STARTING', 'RUNNING'];
export const TERMINAL_SESSION_STATES: readonly SessionState[] = ['COMPLETED', 'FAILED', 'CANCELLED'];
export const isActiveSession = (s: SessionState) => ACTIVE_SESSION_STATES.includes(s);
export const isWorkingSession = (s: SessionState) => WORKING_SESSION_STATES.includes(s);

export const ExecutionStatus = z.enum(['STARTING', 'RUNNING', 'READY', 'STOPPING', 'STOPPED', 'COMPLETED', 'FAILED']);
export type ExecutionStatus = z.infer<typeof ExecutionStatus>;
/** Statuses in which an execution still has (or may have) a live process. */
export const LIVE_EXECUTION_STATUSES: readonly ExecutionStatus[] = ['STARTING', 'RUNNING', 'READY', 'STOPPING'];
export const isLiveExecution = (s: ExecutionStatus) => LIVE_EXECUTION_STATUSES.includes(s);
/** Ending or ended: being torn down or gone, so it takes no new prompt and has no turn to cancel (STOPPING is live, yet refuses). */
export const ENDING_EXECUTION_STATUSES: readonly ExecutionStatus[] = ['STOPPING', 'STOPPED', 'COMPLETED', 'FAILED'];
export const isEndingExecution = (s: ExecutionStatus) => ENDING_EXECUTION_STATUSES.includes(s);

export const Protocol = z.enum(['acp', 'codex']);
export type Protocol = z.infer<typeof Protocol>;

export const WakeupStatus = z.enum(['queued', 'claimed', 'finished', 'cancelled']);
export type WakeupStatus = z.infer<typeof WakeupStatus>;

export const HoldMode = z.enum(['pause', 'cancel']);
export type HoldMode = z.infer<typeof HoldMode>;

export const QuestionStatus = z.enum(['pending', 'answered', 'rejected', 'expired', 'cancelled']);
export type QuestionStatus = z.infer<typeof QuestionStatus>;

export const DeliveryMode = z.enum(['queued', 'interrupt']);
export type DeliveryMode = z.infer<typeof DeliveryMode>;

export const McpMode = z.enum(['task', 'config', 'office', 'external']);
export type McpMode = z.infer<typeof McpMode>;
