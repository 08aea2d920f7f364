import { useEffect, useState } from 'preact/hooks';
import { ACTIVE, WORKING } from './model';
import type { PushNotification, SessionState, TaskHold, TaskListItem } from '@kandev/contracts';

/**
 * What the board and the tree show, kept current by /ws pushes: tasks (from GET /tasks rows), the
 * hold each task is in (list rows, then `tree_hold.*` pushes) and its sessions' states
 * (`session.state_changed`). Views re-render on `version`.
 */
export class Store {
  readonly tasks = new Map<string, TaskListItem>();
  /** Hold per task from pushes; `null` = released since the row was read. */
  private readonly holdOverrides = new Map<string, TaskHold | null>();
  private readonly sessions = new Map<string, Map<string, SessionState>>();
  /** Roots seen in pushes that the board did not list yet (created or changed since the page was read). */
  readonly newRoots = new Set<string>();
  private readonly listeners = new Set<() => void>();
  version = 0;
  private scheduled = false;

  subscribe(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }
  /** Batches bursts of pushes (a 2,000-member hold) into one render per frame. */
  changed(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.version++;
      this.listeners.forEach((fn) => fn());
    });
  }

  upsert(items: TaskListItem[]): void {
    for (const t of items) {
      this.tasks.set(t.id, t);
      // A fresh row is newer than what pushes said before it was read.
      this.holdOverrides.delete(t.id);
    }
    this.changed();
  }

  holdOf(id: string): TaskHold | null {
    if (this.holdOverrides.has(id)) return this.holdOverrides.get(id) ?? null;
    return this.tasks.get(id)?.hold ?? null;
  }

  /** The newest known session state of a task, and whether one is working or active. */
  sessionInfo(id: string): { state: SessionState | null; working: boolean; active: boolean } {
    const m = this.sessions.get(id);
    if (!m || m.size === 0) {
      const n = this.tasks.get(id)?.active_session_count ?? 0;
      return { state: null, working: false, active: n > 0 };
    }
    const states = [...m.values()];
    return { state: states[states.length - 1]!, working: states.some((s) => WORKING.includes(s)), active: states.some((s) => ACTIVE.includes(s)) };
  }

  apply(n: PushNotification): void {
    switch (n.action) {
      case 'task.created':
      case 'task.state_changed': {
        const { task } = n.payload;
        const had = this.tasks.get(task.id);
        this.tasks.set(task.id, { child_count: 0, active_session_count: 0, hold: null, ...had, ...task });
        if (!had && task.parent_id === null) this.newRoots.add(task.id);
        // A new subtask: its parent now has one more (the tree row becomes expandable).
        const parent = !had && n.action === 'task.created' && task.parent_id ? this.tasks.get(task.parent_id) : undefined;
        if (parent) this.tasks.set(parent.id, { ...parent, child_count: (parent.child_count ?? 0) + 1 });
        break;
      }
      case 'session.state_changed': {
        const s = n.payload.session;
        const m = this.sessions.get(s.task_id) ?? new Map<string, SessionState>();
        m.delete(s.id); // re-insert: the newest change is last
        m.set(s.id, s.state);
        this.sessions.set(s.task_id, m);
        break;
      }
      case 'tree_hold.created':
      case 'tree_hold.released': {
        const { hold } = n.payload;
        const ids = new Set([hold.root_task_id, ...hold.members.map((m) => m.task_id)]);
        for (const id of ids) {
          if (n.action === 'tree_hold.created') this.holdOverrides.set(id, { id: hold.id, mode: hold.mode });
          else if (this.holdOf(id)?.id === hold.id) this.holdOverrides.set(id, null);
        }
        break;
      }
      default:
        return;
    }
    this.changed();
  }
}

export const store = new Store();

/** Re-render the calling component whenever the store changes. */
export function useStore(): number {
  const [v, setV] = useState(store.version);
  useEffect(() => store.subscribe(() => setV(store.version)), []);
  return v;
}
