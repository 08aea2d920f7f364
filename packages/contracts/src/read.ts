import { z } from 'zod';
import { Actor, OperatorActor } from './envelope.js';
import { Task, TaskHold, Workspace } from './entities.js';
import { TaskStatus } from './enums.js';
import { endpoint } from './endpoints.js';
import { text } from './text.js';

/*
 * The operator's read surface (SPEC ): workspace and task listings with keyset paging,
 * and the session transcript. Paging rules and caps are in docs/limits.md; the transcript's flow is
 * in docs/architecture.md and ADR 0022.
 */

const id = z.uuid();
const ts = z.string();

/** Bounds of a page (docs/limits.md). A larger `limit` is clamped to the maximum, not refused. */
export const PageLimits = {
  workspaces: { default: 50, max: 200 },
  tasks: { default: 50, max: 200 },
  messages: { default: 200, max: 1_000 },
  /** `q` (title search) length. */
  query: 200,
  /** An opaque cursor's length. */
  cursor: 200,
} as const;

const limit = z.number().int().min(1);
/** Opaque to clients: base64url of the last row's sort key. A malformed one is a VALIDATION_ERROR. */
const cursor = text({ min: 1, max: PageLimits.cursor });

export const WorkspacePage = z.object({ items: z.array(Workspace), next_cursor: z.string().nullable() });
export type WorkspacePage = z.infer<typeof WorkspacePage>;

/** A task as a board card: the task plus what the board shows beside it. */
export const TaskListItem = Task.extend({
  child_count: z.number().int().nonnegative(),
  active_session_count: z.number().int().nonnegative(),
  hold: TaskHold.nullable(),
});
export type TaskListItem = z.infer<typeof TaskListItem>;
export const TaskPage = z.object({ items: z.array(TaskListItem), next_cursor: z.string().nullable() });
export type TaskPage = z.infer<typeof TaskPage>;

export const TaskListRequest = z.object({
  actor: Actor,
  workspace_id: id,
  /** Only the direct children of this task. */
  parent_id: id.optional(),
  /** Only root tasks (no parent). Exclusive with parent_id. */
  roots: z.boolean().optional(),
  /** One status or several (any of them). */
  status: z.array(TaskStatus).min(1).max(TaskStatus.options.length).optional(),
  /** Case-insensitive substring of the title. */
  q: text({ min: 1, max: PageLimits.query }).optional(),
  /** true: only archived tasks; false: only tasks not archived; absent: both. */
  archived: z.boolean().optional(),
  limit: limit.optional(),
  cursor: cursor.optional(),
});
export type TaskListRequest = z.infer<typeof TaskListRequest>;

/**
 * Who wrote a transcript item: `user` (an operator's prompt, or another task's message), `agent`
 * (its text, tool calls, permission requests, questions), `system` (the transcript's own markers).
 */
export const TranscriptRole = z.enum(['user', 'agent', 'system']);
export type TranscriptRole = z.infer<typeof TranscriptRole>;

/**
 * What a transcript item is:
 * - `prompt`: a prompt that started a turn (first prompt, operator prompt, delivered queued message, interrupt message);
 * - `agent_text`: the agent's streamed text, coalesced (one item per run of chunks of one turn, up to the item cap);
 * - `tool_call`: the agent started a tool call (title, kind, input in `meta`);
 * - `tool_result`: a tool call ended (status, output);
 * - `permission_request`: the agent asked the operator for permission;
 * - `question`: the agent asked clarification questions (ask_user_questions);
 * - `truncated`: the session's transcript reached its cap; nothing after this item was kept.
 */
export const TranscriptKind = z.enum(['prompt', 'agent_text', 'tool_call', 'tool_result', 'permission_request', 'question', 'truncated']);
export type TranscriptKind = z.infer<typeof TranscriptKind>;

export const TranscriptMeta = z.record(z.string(), z.unknown());

export const TranscriptItem = z.object({
  seq: z.number().int().positive(),
  turn_id: id.nullable(),
  role: TranscriptRole,
  kind: TranscriptKind,
  text: z.string(),
  /** Kind-specific details (a tool call's id and status, a prompt's sender task, `truncated: true` when the text was cut). */
  meta: TranscriptMeta.optional(),
  created_at: ts,
});
export type TranscriptItem = z.infer<typeof TranscriptItem>;

export const MessagePage = z.object({ items: z.array(TranscriptItem), next_cursor: z.string().nullable() });
export type MessagePage = z.infer<typeof MessagePage>;

/**
 * The `session.message` event (pushed on /ws): one transcript item. `op: "created"` carries the
 * item's whole text so far; `op: "appended"` carries only the chunk added to the item with that
 * `seq` (an agent's streamed text), so a console appends `text` to what it shows for `seq`.
 * `offset` (appended only): the item's size in UTF-8 bytes before this chunk, so a client that read
 * the item from the API can tell a chunk it already has (a page read after the append) from one it
 * lacks, and a chunk it missed from a gap.
 */
export const SessionMessageData = TranscriptItem.extend({ op: z.enum(['created', 'appended']), offset: z.number().int().nonnegative().optional() });
export type SessionMessageData = z.infer<typeof SessionMessageData>;

/** One tool call report of an agent (ACP `tool_call` / `tool_call_update`, Codex item events), relayed by lifecycle. */
export const AgentToolCallData = z.object({
  execution_id: id,
  turn_id: id.nullable(),
  tool_call_id: z.string().min(1),
  /** `started` opens the call; `completed` / `failed` end it with its output. */
  phase: z.enum(['started', 'completed', 'failed']),
  title: z.string().nullable(),
  kind: z.string().nullable(),
  /** The call's input (started) or output (completed/failed), as text. */
  text: z.string(),
});
export type AgentToolCallData = z.infer<typeof AgentToolCallData>;

/** Most items `GET /inbox` answers (oldest first); `truncated` says when more are pending. */
export const INBOX_MAX_ITEMS = 500;

/**
 * One thing waiting on a person: a pending question bundle (`clarification`, `id` = the
 * bundle's id, `text` = its pending questions, one per line) or a pending permission request
 * (`permission`, `id` = the request's id, `text` = its title). `ancestor_ids` are the task's
 * ancestors, root first, so a board can badge every card whose subtree has something pending;
 * `expires_at` is when a question bundle expires (null for permissions, which do not).
 */
export const InboxItem = z.object({
  kind: z.enum(['clarification', 'permission']),
  id,
  task_id: id,
  task_title: z.string(),
  session_id: id,
  created_at: ts,
  text: z.string(),
  ancestor_ids: z.array(id),
  expires_at: ts.nullable(),
});
export type InboxItem = z.infer<typeof InboxItem>;
export const Inbox = z.object({ items: z.array(InboxItem), truncated: z.boolean() });
export type Inbox = z.infer<typeof Inbox>;

/**
 * The `inbox.changed` notification `/ws` workspace subscribers get when a question bundle or a
 * permission request of the workspace opens or closes (the gateway derives it from
 * `clarification.requested|closed` and `permission.requested|closed`): re-read `GET /inbox`.
 */
export const InboxChanged = z.object({
  workspace_id: id,
  task_id: id.nullable(),
  session_id: id.nullable(),
  kind: z.enum(['clarification', 'permission']),
  /** The bundle's or request's id, when the event names it. */
  id: id.nullable(),
  change: z.enum(['opened', 'closed']),
  event_id: z.string(),
  occurred_at: ts,
});
export type InboxChanged = z.infer<typeof InboxChanged>;

/** `POST /ws/tickets` (ADR 0058): a single-use ticket for `/ws?ticket=`, valid 30 s. */
export const WS_TICKET_TTL_MS = 30_000;
export const WsTicket = z.object({ ticket: z.string(), expires_at: ts });
export type WsTicket = z.infer<typeof WsTicket>;

export const OrchRead = {
  workspaceList: endpoint('orch.workspace.list', z.object({ actor: OperatorActor, limit: limit.optional(), cursor: cursor.optional() }), WorkspacePage),
  /** One workspace the actor may see (NOT_FOUND / FORBIDDEN otherwise); the /ws workspace subscription checks through it. */
  workspaceGet: endpoint('orch.workspace.get', z.object({ actor: Actor, workspace_id: id }), Workspace),
  taskList: endpoint('orch.task.list', TaskListRequest, TaskPage),
  sessionMessages: endpoint(
    'orch.session.messages',
    z.object({ actor: Actor, session_id: id, after_seq: z.number().int().nonnegative().optional(), limit: limit.optional() }),
    MessagePage,
  ),
  /** every pending question bundle and permission request of a workspace (children included), oldest first. */
  inbox: endpoint('orch.inbox.get', z.object({ actor: Actor, workspace_id: id }), Inbox),
  /**
   * ADR 0058: record the single use of a `/ws` ticket (its `jti`), shared by every gateway replica.
   * `first: false` = the ticket was used before: the upgrade is refused.
   */
  ticketConsume: endpoint(
    'orch.ws_ticket.consume',
    z.object({ actor: OperatorActor, jti: text({ min: 16, max: 64 }), expires_at: z.iso.datetime({ offset: true }) }),
    z.object({ first: z.boolean() }),
  ),
} as const;
