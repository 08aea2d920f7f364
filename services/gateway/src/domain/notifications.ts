import { PUSHED_EVENT_TYPES, eventSubject, type EventEnvelope } from '@kandev/contracts';
import type { NotificationFrame } from './frames.js';

const pushed = new Set<string>(PUSHED_EVENT_TYPES);
const pushedSubjects = new Set<string>(PUSHED_EVENT_TYPES.map(eventSubject));

/** True for the subject of an event type the gateway pushes (`kandev.evt.<type>`), before decoding it. */
export const isPushedSubject = (subject: string): boolean => pushedSubjects.has(subject);

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The subscription key of a whole workspace (`subscribe {workspace_id}`); task subscriptions are keyed by the task id. */
export const workspaceKey = (workspaceId: string): string => `workspace:${workspaceId}`;

/**
 * Task ids (and the workspace's key) whose subscribers should see this event: the event's own task and, for tree-hold events,
 * every member of the hold (an operator watching a child sees its tree being paused, R-4.9).
 * Empty for events the gateway does not push.
 */
export function notificationTargets(ev: EventEnvelope): string[] {
  if (!pushed.has(ev.type)) return [];
  const targets = new Set<string>();
  if (ev.task_id) targets.add(ev.task_id);
  const data: Record<string, unknown> = isRecord(ev.data) ? ev.data : {};
  const hold = isRecord(data.hold) ? data.hold : null;
  if (hold && typeof hold.root_task_id === 'string') targets.add(hold.root_task_id);
  if (hold && Array.isArray(hold.members)) {
    for (const m of hold.members) if (isRecord(m) && typeof m.task_id === 'string') targets.add(m.task_id);
  }
  // Workspace subscribers (the board) see every pushed event of the workspace.
  targets.add(workspaceKey(ev.workspace_id));
  return [...targets];
}

/** The frame pushed for an event: its data plus where and when it happened. */
export function toNotification(ev: EventEnvelope): NotificationFrame {
  const data: Record<string, unknown> = isRecord(ev.data) ? ev.data : {};
  const sessionId = ev.session_id ?? (typeof data.session_id === 'string' ? data.session_id : null);
  return {
    type: 'notification',
    action: ev.type,
    payload: {
      ...data,
      workspace_id: ev.workspace_id,
      task_id: ev.task_id ?? null,
      session_id: sessionId,
      event_id: ev.id,
      occurred_at: ev.occurred_at,
    },
  };
}

/** The events that open or close something of the inbox, and what each one does to it. */
const INBOX_CHANGES: Readonly<Record<string, { kind: 'clarification' | 'permission'; change: 'opened' | 'closed' }>> = {
  'clarification.requested': { kind: 'clarification', change: 'opened' },
  'clarification.closed': { kind: 'clarification', change: 'closed' },
  'permission.requested': { kind: 'permission', change: 'opened' },
  'permission.closed': { kind: 'permission', change: 'closed' },
};

/**
 * The `inbox.changed` notification an event implies for its workspace's subscribers (contracts
 * InboxChanged), or null. Derived here from the four events rather than published as a fifth: the
 * events already say everything, and a workspace subscriber gets them in the same order.
 */
export function inboxChangeOf(ev: EventEnvelope): NotificationFrame | null {
  const c = INBOX_CHANGES[ev.type];
  if (!c) return null;
  const data: Record<string, unknown> = isRecord(ev.data) ? ev.data : {};
  const item = c.kind === 'clarification' ? (isRecord(data.bundle) ? data.bundle : {}) : isRecord(data.permission) ? data.permission : data;
  const id = typeof item.id === 'string' ? item.id : null;
  const sessionId = ev.session_id ?? (typeof item.session_id === 'string' ? item.session_id : null);
  return {
    type: 'notification',
    action: 'inbox.changed',
    payload: {
      workspace_id: ev.workspace_id,
      task_id: ev.task_id ?? null,
      session_id: sessionId,
      kind: c.kind,
      id,
      change: c.change,
      event_id: ev.id,
      occurred_at: ev.occurred_at,
    },
  };
}
