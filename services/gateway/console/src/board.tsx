import { useEffect, useState } from 'preact/hooks';
import { get, qs } from './api';
import { hrefOf, useLive, useResync } from './app';
import { NewTaskForm } from './create-forms';
import { useWaitingBySubtree } from './inbox';
import { COLUMNS, STATUS_WORDS, columnOf, holdBadge, needsAttention } from './model';
import { store, useStore } from './store';
import type { TaskListItem, TaskPage } from '@kandev/contracts';
import { Badge, ErrorNote, Spinner } from './ui';

/** Subscribe the console's socket to a whole workspace (every task's pushes) while mounted. */
export function useWorkspaceLive(workspace: string): boolean {
  const live = useLive();
  const [refused, setRefused] = useState(false);
  useEffect(() => {
    const off = live.subscribe({ workspace_id: workspace });
    const offState = live.onState(() => setRefused(live.refused.has(`w:${workspace}`)));
    return () => (off(), offState());
  }, [workspace]);
  return refused;
}

export function Board({ workspace }: { workspace: string }) {
  useStore();
  const resync = useResync();
  const refused = useWorkspaceLive(workspace);
  const [q, setQ] = useState('');
  const [query, setQuery] = useState('');
  const [ids, setIds] = useState<string[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);

  // Search as the operator types, without a request per key.
  useEffect(() => {
    const t = setTimeout(() => setQuery(q.trim()), 250);
    return () => clearTimeout(t);
  }, [q]);

  const load = async (after: string | null) => {
    setLoading(true);
    try {
      const page = await get<TaskPage>(`/tasks${qs({ workspace_id: workspace, roots: true, q: query, limit: 100, cursor: after })}`);
      store.upsert(page.items);
      setIds((have) => (after ? [...have, ...page.items.map((t) => t.id)] : page.items.map((t) => t.id)));
      setCursor(page.next_cursor);
      setError(null);
    } catch (e) {
      setError(e);
    } finally {
      setLoading(false);
    }
  };
  useEffect(() => void load(null), [workspace, query, resync]);

  // Roots that appeared through pushes after the page was read.
  const shown = new Set(ids);
  const needle = query.toLowerCase();
  for (const id of store.newRoots) {
    const t = store.tasks.get(id);
    if (t && t.workspace_id === workspace && !shown.has(id) && t.title.toLowerCase().includes(needle)) shown.add(id);
  }
  const tasks = [...shown].map((id) => store.tasks.get(id)).filter((t): t is TaskListItem => !!t && !t.archived_at);
  // What waits on a person anywhere under each card (a child's question too), live with the inbox.
  const waiting = useWaitingBySubtree();

  return (
    <main class="page board-page">
      <div class="toolbar">
        <h1>Board</h1>
        <label for="board-q" class="sr-only">
          Search task titles
        </label>
        <input
          id="board-q"
          type="search"
          placeholder="Search task titles"
          value={q}
          onInput={(e) => setQ((e.target as HTMLInputElement).value)}
          data-testid="board-search"
        />
        {loading ? <Spinner label="Loading tasks" /> : null}
        {refused ? <span class="note">Live updates for the whole workspace are not offered by this gateway; reload to refresh.</span> : null}
      </div>
      <details class="card new-task-card">
        <summary>
          <h2 class="inline">New task</h2>
        </summary>
        <NewTaskForm
          workspace={workspace}
          parents={tasks.map((t) => ({ id: t.id, title: t.title }))}
          created={(t) => {
            // Shown at once, before its task.created push (a root joins the board's list).
            if (t.parent_id === null) store.newRoots.add(t.id);
            store.upsert([{ ...t, child_count: 0, active_session_count: 0, hold: null }]);
          }}
        />
      </details>
      <ErrorNote error={error} what="Tasks" />
      {!error && !loading && tasks.length === 0 ? <p class="empty">{query ? `No root task matches “${query}”.` : 'No tasks in this workspace yet.'}</p> : null}
      <div class="columns">
        {COLUMNS.map((col) => {
          const inCol = tasks.filter((t) => columnOf(t.status) === col.key);
          return (
            <section class="column" aria-label={col.title} data-testid={`column-${col.key}`}>
              <h2>
                {col.title} <span class="count">{inCol.length}</span>
              </h2>
              <ul>
                {inCol.map((t) => (
                  <li>
                    <TaskCard task={t} workspace={workspace} waiting={waiting.get(t.id) ?? 0} />
                  </li>
                ))}
              </ul>
            </section>
          );
        })}
      </div>
      {cursor ? (
        <button type="button" class="btn plain" onClick={() => load(cursor)} disabled={loading}>
          Load more tasks
        </button>
      ) : null}
    </main>
  );
}

function TaskCard({ task, workspace, waiting }: { task: TaskListItem; workspace: string; waiting: number }) {
  const badge = holdBadge(store.holdOf(task.id));
  const s = store.sessionInfo(task.id);
  return (
    <a class="task-card" href={hrefOf(workspace, task.id)} data-testid="task-card">
      <span class="title">{task.title}</span>
      <span class="meta">
        <Badge kind={`status-${task.status.toLowerCase()}`}>{STATUS_WORDS[task.status]}</Badge>
        {badge ? <Badge kind={badge === 'Paused' ? 'paused' : 'cancelled'}>{badge}</Badge> : null}
        {s.working ? <Badge kind="running">Running</Badge> : s.active ? <Badge kind="active">Session open</Badge> : null}
        {!badge && needsAttention(task.status, s.active) ? <Badge kind="attention">Needs attention</Badge> : null}
        {waiting > 0 ? (
          <Badge kind="waiting">
            <span data-testid="inbox-badge" title="Questions or permission requests wait on you in this task or its subtasks (see the Inbox)">
              <span aria-hidden="true">⚑ </span>
              {waiting} waiting on you
            </span>
          </Badge>
        ) : null}
        {task.child_count > 0 ? (
          <span class="children">
            {task.child_count} subtask{task.child_count === 1 ? '' : 's'}
          </span>
        ) : null}
      </span>
    </a>
  );
}
