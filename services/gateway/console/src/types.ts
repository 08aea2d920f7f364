// The pinned shapes of INTERFACES.md the console reads (fields may be added server-side; only what is used is named).

export type TaskStatus = 'TODO' | 'SCHEDULING' | 'IN_PROGRESS' | 'REVIEW' | 'BLOCKED' | 'WAITING_FOR_INPUT' | 'COMPLETED' | 'FAILED' | 'CANCELLED';
export type SessionState = 'CREATED' | 'STARTING' | 'RUNNING' | 'WAITING_FOR_INPUT' | 'COMPLETED' | 'FAILED' | 'CANCELLED';

export interface Workspace {
  id: string;
  name: string;
  created_at: string;
}
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

export interface Task {
  id: string;
  workspace_id: string;
  parent_id: string | null;
  title: string;
  status: TaskStatus;
  office: boolean;
  agent: string | null;
  archived_at: string | null;
  cancelled_at: string | null;
  created_at: string;
  updated_at: string;
}
/** A row of GET /tasks. */
export interface TaskItem extends Task {
  child_count: number;
  active_session_count: number;
  hold: { id: string; mode: 'pause' | 'cancel' } | null;
}
export interface Session {
  id: string;
  task_id: string;
  state: SessionState;
  error_message: string | null;
  is_primary: boolean;
  agent: string | null;
  started_at: string | null;
  completed_at: string | null;
  updated_at: string;
}
export interface TaskDetail extends Task {
  sessions: Session[];
}
export interface Turn {
  id: string;
  started_at: string;
  completed_at: string | null;
  stop_reason: string | null;
}
export interface SessionDetail extends Session {
  execution: { execution_id: string; status: string; pid: number | null; protocol: string } | null;
  turns: Turn[];
}
export interface Message {
  seq: number;
  turn_id: string | null;
  role: string;
  kind: string;
  text: string;
  created_at: string;
}
export interface PermissionOption {
  option_id: string;
  name: string;
  kind: string;
}
export interface Permission {
  id: string;
  session_id: string;
  turn_id: string | null;
  title: string;
  options: PermissionOption[];
  status: 'pending' | 'answered' | 'cancelled';
  chosen_option_id: string | null;
  created_at: string;
  closed_at: string | null;
}
export interface Question {
  id: string;
  text: string;
  options: string[] | null;
  status: string;
  answer: string | null;
}
export interface Bundle {
  id: string;
  task_id: string;
  session_id: string;
  turn_id: string | null;
  status: string;
  questions: Question[];
  active?: boolean;
  superseded?: boolean;
  created_at?: string;
}
export interface HoldMember {
  task_id: string;
  depth: number;
  task_status: TaskStatus;
  skip_reason: string | null;
}
export interface Hold {
  id: string;
  workspace_id: string;
  root_task_id: string;
  mode: 'pause' | 'cancel';
  created_by: string;
  reason: string | null;
  created_at: string;
  released_at: string | null;
  members: HoldMember[];
}
export interface Preview {
  task_count: number;
  tasks: { id: string; title: string; status: TaskStatus; depth: number }[];
  active_wakeup_count: number;
  active_hold: Hold | null;
}
export interface CostSummary {
  task_id: string;
  task_count: number;
  cost_cents: number;
  tokens_in: number;
  tokens_cached_in: number;
  tokens_out: number;
  unpriced_events?: number;
}
export interface AuditEntry {
  id: string;
  action: string;
  actor: string;
  reason: string | null;
  outcome: string;
  details: Record<string, unknown>;
  created_at: string;
}
export interface Notification {
  type: 'notification';
  action: string;
  payload: Record<string, any>;
}
export interface QueuedMessage {
  id: string;
  task_id: string;
  session_id: string;
  position: number;
  prompt: string;
  sender_task_id: string | null;
  queued_by: string;
  queued_at: string;
}
/** A row of GET /inbox. */
export interface InboxItem {
  kind: 'clarification' | 'permission';
  id: string;
  task_id: string;
  task_title: string;
  session_id: string;
  created_at: string;
  text: string;
}
