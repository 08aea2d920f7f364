// Pure rules of the console (no DOM, no fetch): unit-tested in services/gateway/test/console-model.test.ts.
import type { SessionState, TaskListItem, TaskStatus, TranscriptItem } from '@kandev/contracts';

const CODE_WORDS: Record<string, string> = {
  UNAUTHORIZED: 'The gateway did not accept your operator token (missing, expired or signed with another secret). Sign in again.',
  FORBIDDEN: 'Your operator token does not give access to this.',
  VALIDATION_ERROR: 'The server refused the request as invalid',
  BAD_REQUEST: 'The server could not read the request',
  CONFLICT: 'This cannot be done in the current state',
  UNAVAILABLE: 'The server is shutting down or not ready; try again in a moment.',
  TIMEOUT: 'The server took too long to answer; try again.',
  INTERNAL_ERROR: 'The server failed while handling this; try again, and check the service logs if it persists.',
  NETWORK: 'Cannot reach the gateway (network error). Check that it is running.',
};

/** An API error in words an operator reads. A missing route (a gateway without that feature) says so. */
export function plainWords(status: number, code: string, message: string, path: string): string {
  if (status === 404 && /^(no route|Route) /i.test(message))
    return `This gateway does not offer ${path.split('?')[0]!.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/gi, ':id')} yet (404), so this part of the console is unavailable.`;
  if (code === 'NOT_FOUND') return `Not found: ${message}.`;
  const words = CODE_WORDS[code];
  if (!words) return `The request failed (${status || 'no answer'}${code ? ` ${code}` : ''}): ${message}.`;
  // Codes whose server message adds the reason (which state, which field) keep it.
  if (code === 'VALIDATION_ERROR' || code === 'BAD_REQUEST' || code === 'CONFLICT') return `${words}: ${message}.`;
  return words;
}

/** Board columns: the nine task statuses folded into the six an operator scans. */
export const COLUMNS: { key: string; title: string; statuses: TaskStatus[] }[] = [
  { key: 'todo', title: 'To do', statuses: ['TODO', 'SCHEDULING'] },
  { key: 'progress', title: 'In progress', statuses: ['IN_PROGRESS'] },
  { key: 'waiting', title: 'Waiting', statuses: ['WAITING_FOR_INPUT', 'BLOCKED'] },
  { key: 'review', title: 'Review', statuses: ['REVIEW'] },
  { key: 'done', title: 'Done', statuses: ['COMPLETED'] },
  { key: 'stopped', title: 'Failed / cancelled', statuses: ['FAILED', 'CANCELLED'] },
];

export function columnOf(status: TaskStatus): string {
  return COLUMNS.find((c) => c.statuses.includes(status))?.key ?? 'todo';
}

export const WORKING: SessionState[] = ['STARTING', 'RUNNING'];
export const ACTIVE: SessionState[] = ['CREATED', 'STARTING', 'RUNNING', 'WAITING_FOR_INPUT'];

/** The badge a task carries from the hold it is a member of. */
export function holdBadge(hold: { mode: 'pause' | 'cancel' } | null | undefined): string | null {
  if (!hold) return null;
  return hold.mode === 'pause' ? 'Paused' : 'Cancelled (tree)';
}

/** Money in the one currency the price table uses (US dollars); sub-cent totals keep their precision. */
export function formatCost(cents: number): string {
  const dollars = cents / 100;
  const digits = dollars !== 0 && Math.abs(dollars) < 0.01 ? 4 : 2;
  return new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD', minimumFractionDigits: digits, maximumFractionDigits: digits }).format(dollars);
}

export const formatCount = (n: number) => new Intl.NumberFormat('en-US').format(n);

/** Reconnect delay: exponential from 500 ms, capped at 15 s, with up to 30 % jitter so consoles do not reconnect in lockstep. */
export function backoffMs(attempt: number, random: number = Math.random()): number {
  const base = Math.min(15_000, 500 * 2 ** Math.max(0, attempt));
  return Math.round(base * (1 - 0.3 * random));
}

/** Merge transcript items by `seq` (a live push may repeat what a page already returned), oldest first. */
export function mergeMessages(have: TranscriptItem[], more: TranscriptItem[]): TranscriptItem[] {
  if (more.length === 0) return have;
  const bySeq = new Map<number, TranscriptItem>();
  for (const m of have) bySeq.set(m.seq, m);
  for (const m of more) {
    // Items only grow: a copy read before chunks this console already applied must not take them back.
    const held = bySeq.get(m.seq);
    bySeq.set(m.seq, held && held.text.length > m.text.length && held.text.startsWith(m.text) ? held : m);
  }
  return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
}

/**
 * Apply one `session.message` push: `created` carries the item's whole text so far (replace by seq),
 * `appended` only the chunk added to the item with that seq (an agent's streamed text), placed by its
 * `offset` when it has one: a chunk the held text already contains changes nothing. null: the item is
 * not held, or a chunk before this one is missing, so the caller must read the item from the API.
 */
export function applyPush(have: TranscriptItem[], push: TranscriptItem & { op?: 'created' | 'appended'; offset?: number }): TranscriptItem[] | null {
  const { op, offset, ...item } = push;
  if (op !== 'appended') return mergeMessages(have, [item]);
  const i = have.findIndex((m) => m.seq === item.seq);
  if (i < 0) return null;
  const held = have[i]!.text;
  if (offset !== undefined) {
    // The item's size says where the chunk goes: already held (a page read after the append), next, or after a miss.
    const size = utf8Bytes(held);
    if (size >= offset + utf8Bytes(item.text)) return have;
    if (size !== offset) return null;
  }
  const next = have.slice();
  next[i] = { ...have[i]!, text: held + item.text };
  return next;
}

const utf8 = new TextEncoder();
const utf8Bytes = (s: string) => utf8.encode(s).length;

const KIND_WORDS: Record<string, string> = {
  prompt: 'prompt',
  agent_text: '',
  tool_call: 'tool call',
  tool_result: 'tool result',
  permission_request: 'asks permission',
  question: 'asks',
  truncated: 'transcript cut',
};
/** The label beside a transcript line: who, and what it is when not plain text. */
export function kindWords(role: string, kind: string): string {
  const k = KIND_WORDS[kind] ?? kind.replace(/_/g, ' ');
  return k ? `${role} · ${k}` : role;
}

/** Whether a pushed item leaves a hole after what is held (then the console pages from the last seq it has). */
export function hasGap(have: TranscriptItem[], next: TranscriptItem): boolean {
  const last = have.length ? have[have.length - 1]!.seq : 0;
  return next.seq > last + 1 && have.length > 0;
}

/** One visible row of the task tree: a task, or the "load more" row after a parent's last loaded child. */
export type TreeRow =
  | { kind: 'task'; task: TaskListItem; depth: number; expanded: boolean; loading: boolean }
  | { kind: 'more'; parentId: string; depth: number; loading: boolean };
export interface TreeNodeState {
  children: string[];
  cursor: string | null;
  loaded: boolean;
  loading: boolean;
}

/**
 * The rows a tree shows: depth-first from the root, children only under expanded nodes. A node whose
 * children are paged gets a "more" row after its last loaded child.
 */
export function flattenTree(rootId: string, tasks: Map<string, TaskListItem>, nodes: Map<string, TreeNodeState>, expanded: Set<string>): TreeRow[] {
  const rows: TreeRow[] = [];
  type Item = { id: string; depth: number } | { more: string; depth: number; loading: boolean };
  const stack: Item[] = [{ id: rootId, depth: 0 }];
  while (stack.length) {
    const item = stack.pop()!;
    if ('more' in item) {
      rows.push({ kind: 'more', parentId: item.more, depth: item.depth, loading: item.loading });
      continue;
    }
    const task = tasks.get(item.id);
    if (!task) continue;
    const node = nodes.get(item.id);
    const open = expanded.has(item.id);
    rows.push({ kind: 'task', task, depth: item.depth, expanded: open, loading: !!node?.loading });
    if (!open || !node) continue;
    if (node.cursor) stack.push({ more: item.id, depth: item.depth + 1, loading: node.loading });
    for (let i = node.children.length - 1; i >= 0; i--) stack.push({ id: node.children[i]!, depth: item.depth + 1 });
  }
  return rows;
}

/** The slice of a fixed-row-height list to render for a scroll position (plus overscan rows either side). */
export function visibleWindow(total: number, rowHeight: number, scrollTop: number, viewport: number, overscan = 8): { start: number; end: number } {
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const count = Math.ceil(viewport / rowHeight);
  return { start: Math.max(0, first - overscan), end: Math.min(total, first + count + overscan) };
}

export const STATUS_WORDS: Record<string, string> = {
  TODO: 'To do',
  SCHEDULING: 'Scheduling',
  IN_PROGRESS: 'In progress',
  REVIEW: 'Review',
  BLOCKED: 'Blocked',
  WAITING_FOR_INPUT: 'Waiting for input',
  COMPLETED: 'Completed',
  FAILED: 'Failed',
  CANCELLED: 'Cancelled',
};

export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '';
  const s = Math.round((now - Date.parse(iso)) / 1000);
  if (!Number.isFinite(s)) return '';
  if (s < 5) return 'just now';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return new Date(iso).toLocaleString();
}

/**
 * A task that needs the operator (ADR 0025, `task.attention`): IN_PROGRESS with no live agent session,
 * as a resume or restore leaves one whose session had ended. Nothing will move it unless someone restarts it.
 */
export function needsAttention(status: TaskStatus, hasLiveSession: boolean): boolean {
  return status === 'IN_PROGRESS' && !hasLiveSession;
}

/**
 * Whether a token another tab offers is worth keeping (ADR 0058): a JWT whose `exp` is still ahead
 * (read, not verified: the gateway verifies every request). Anything unreadable is refused.
 */
export function tokenUsable(token: string, now = Date.now()): boolean {
  const part = token.split('.')[1];
  if (!part) return false;
  try {
    const claims: unknown = JSON.parse(atob(part.replace(/-/g, '+').replace(/_/g, '/')));
    if (typeof claims !== 'object' || claims === null) return false;
    const exp = (claims as { exp?: unknown }).exp;
    return exp === undefined || (typeof exp === 'number' && exp * 1000 > now);
  } catch {
    return false;
  }
}

/**
 * How many things wait on a person in each task's subtree (R-12.2): an inbox item counts for its
 * task and for every ancestor (`ancestor_ids`), so a root's board card shows what waits deep below it.
 */
export function pendingBySubtree(items: readonly { task_id: string; ancestor_ids: readonly string[] }[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) for (const id of new Set([item.task_id, ...item.ancestor_ids])) counts.set(id, (counts.get(id) ?? 0) + 1);
  return counts;
}

/**
 * When a question bundle expires, in words an operator reads without the colour: seconds under two
 * minutes, minutes under an hour, else the clock time; `soon` under 15 s (styled as urgent too).
 */
export function expiryWords(iso: string, now = Date.now()): { words: string; soon: boolean; expired: boolean } {
  const at = Date.parse(iso);
  if (!Number.isFinite(at)) return { words: '', soon: false, expired: false };
  const s = Math.ceil((at - now) / 1000);
  if (s <= 0) return { words: 'expired', soon: true, expired: true };
  if (s < 120) return { words: `expires in ${s} s`, soon: s < 15, expired: false };
  if (s < 3600) return { words: `expires in ${Math.round(s / 60)} min`, soon: false, expired: false };
  return { words: `expires at ${new Date(at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}`, soon: false, expired: false };
}
