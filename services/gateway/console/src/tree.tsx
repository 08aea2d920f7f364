import { useEffect, useRef, useState } from 'preact/hooks';
import { get, qs } from './api';
import { hrefOf, useLive, useResync } from './app';
import { useWaitingBySubtree } from './inbox';
import { STATUS_WORDS, flattenTree, holdBadge, visibleWindow, type TreeNodeState } from './model';
import { store, useStore } from './store';
import type { TaskListItem, TaskPage } from '@kandev/contracts';
import { Badge, ErrorNote, Spinner } from './ui';

const ROW = 32;
const PAGE = 200;

/**
 * The task tree under a root: children read a page at a time as nodes open (GET /tasks?parent_id),
 * rows rendered only where the viewport is (a 2,000-task tree renders a few dozen rows).
 */
export function TreeView({ workspace, rootId, path, selected }: { workspace: string; rootId: string; path: string[]; selected: string }) {
  useStore();
  const resync = useResync();
  const nodes = useRef(new Map<string, TreeNodeState>()).current;
  const [expanded, setExpanded] = useState(() => new Set<string>([rootId, ...path]));
  const [, setTick] = useState(0);
  const [error, setError] = useState<unknown>(null);
  const [scrollTop, setScrollTop] = useState(0);
  const [viewport, setViewport] = useState(480);
  const box = useRef<HTMLDivElement>(null);

  const loadChildren = async (id: string, fresh: boolean) => {
    const node = nodes.get(id) ?? { children: [], cursor: null, loaded: false, loading: false };
    if (node.loading) return;
    node.loading = true;
    nodes.set(id, node);
    setTick((t) => t + 1);
    try {
      const page = await get<TaskPage>(`/tasks${qs({ workspace_id: workspace, parent_id: id, limit: PAGE, cursor: fresh ? null : node.cursor })}`);
      store.upsert(page.items);
      const ids = page.items.map((t) => t.id);
      node.children = fresh ? ids : [...node.children, ...ids.filter((c) => !node.children.includes(c))];
      node.cursor = page.next_cursor;
      node.loaded = true;
      setError(null);
    } catch (e) {
      setError(e);
    } finally {
      node.loading = false;
      setTick((t) => t + 1);
    }
  };

  // A subtask created under a node whose children are all loaded joins it at once (task.created);
  // under a node still paged, it comes with the pages.
  const live = useLive();
  useEffect(
    () =>
      live.onNotification((n) => {
        const t = n.action === 'task.created' ? (n.payload.task as { id: string; parent_id: string | null } | undefined) : undefined;
        const node = t?.parent_id ? nodes.get(t.parent_id) : undefined;
        if (!t || !node?.loaded || node.cursor || node.children.includes(t.id)) return;
        node.children = [...node.children, t.id];
        setTick((k) => k + 1);
      }),
    [],
  );

  // Open the root and the path to the selected task; after a reconnect, re-read what is open.
  useEffect(() => {
    for (const id of expanded) void loadChildren(id, true);
  }, [rootId, resync]);

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const measure = () => setViewport(el.clientHeight || 480);
    measure();
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);

  const toggle = (id: string) => {
    const next = new Set(expanded);
    if (next.has(id)) next.delete(id);
    else {
      next.add(id);
      if (!nodes.get(id)?.loaded) void loadChildren(id, true);
    }
    setExpanded(next);
  };

  const rows = flattenTree(rootId, store.tasks, nodes, expanded);
  const waiting = useWaitingBySubtree();
  const { start, end } = visibleWindow(rows.length, ROW, scrollTop, viewport);

  // Keep the selected row in view when the tree first shows it.
  const scrolled = useRef(false);
  useEffect(() => {
    if (scrolled.current || !box.current) return;
    const i = rows.findIndex((r) => r.kind === 'task' && r.task.id === selected);
    if (i >= 0) {
      scrolled.current = true;
      if (i * ROW > viewport - ROW) box.current.scrollTop = i * ROW - viewport / 2;
    }
  });

  return (
    <section class="tree card" aria-label="Task tree">
      <h2>
        Tree{' '}
        <span class="count" data-testid="tree-count">
          {rows.filter((r) => r.kind === 'task').length} shown
        </span>
      </h2>
      <ErrorNote error={error} what="Subtasks" />
      <div class="tree-scroll" ref={box} onScroll={(e) => setScrollTop((e.target as HTMLDivElement).scrollTop)} data-testid="tree-scroll">
        <div style={{ height: `${rows.length * ROW}px`, position: 'relative' }} role="tree">
          {rows.slice(start, end).map((r, k) => {
            const top = (start + k) * ROW;
            const pad = 8 + r.depth * 16;
            if (r.kind === 'more')
              return (
                <div class="tree-row" style={{ top: `${top}px`, paddingLeft: `${pad + 22}px` }} key={`more-${r.parentId}`}>
                  <button type="button" class="btn plain small" onClick={() => loadChildren(r.parentId, false)} disabled={r.loading}>
                    {r.loading ? <Spinner /> : null}Load more subtasks
                  </button>
                </div>
              );
            const node = nodes.get(r.task.id);
            // Children read say it; before that the row's count does (0 for a root opened by link, until read).
            const leaf = node?.loaded ? node.children.length === 0 && !node.cursor : r.task.child_count === 0;
            return (
              <TreeRowView
                key={r.task.id}
                leaf={leaf}
                top={top}
                pad={pad}
                task={r.task}
                expanded={r.expanded}
                loading={r.loading}
                selected={r.task.id === selected}
                waiting={waiting.get(r.task.id) ?? 0}
                workspace={workspace}
                toggle={toggle}
              />
            );
          })}
        </div>
      </div>
    </section>
  );
}

function TreeRowView(props: {
  leaf: boolean;
  top: number;
  pad: number;
  task: TaskListItem;
  expanded: boolean;
  loading: boolean;
  selected: boolean;
  /** Questions and permission requests pending in this row's subtree. */
  waiting: number;
  workspace: string;
  toggle: (id: string) => void;
}) {
  const { task } = props;
  const badge = holdBadge(store.holdOf(task.id));
  const s = store.sessionInfo(task.id);
  const hasChildren = !props.leaf;
  return (
    <div
      class={`tree-row${props.selected ? ' selected' : ''}`}
      style={{ top: `${props.top}px`, paddingLeft: `${props.pad}px` }}
      role="treeitem"
      aria-expanded={hasChildren ? props.expanded : undefined}
      data-testid="tree-row"
      data-task-id={task.id}
    >
      {hasChildren ? (
        <button
          type="button"
          class="toggle"
          aria-label={props.expanded ? `Collapse ${task.title}` : `Expand ${task.title}`}
          onClick={() => props.toggle(task.id)}
        >
          {props.loading ? <Spinner /> : props.expanded ? '▾' : '▸'}
        </button>
      ) : (
        <span class="toggle-spacer" />
      )}
      <a href={hrefOf(props.workspace, task.id)} class="tree-title" aria-current={props.selected ? 'page' : undefined}>
        {task.title}
      </a>
      <Badge kind={`status-${task.status.toLowerCase()}`}>{STATUS_WORDS[task.status]}</Badge>
      {badge ? (
        <Badge kind={badge === 'Paused' ? 'paused' : 'cancelled'}>
          <span data-testid="hold-badge">{badge}</span>
        </Badge>
      ) : null}
      {props.waiting > 0 ? (
        <Badge kind="waiting">
          <span data-testid="tree-inbox-badge" title="Questions or permission requests wait on you in this task or below it">
            {props.waiting} waiting
          </span>
        </Badge>
      ) : null}
      {s.working || (s.active && !s.state) ? (
        // From a list row only the count of active sessions is known; pushes then tell working from idle.
        <span class="running" title={s.working ? 'A turn is running' : 'An agent session is open'} data-testid="running">
          <Spinner label="Running" />
        </span>
      ) : null}
      {s.state ? <span class="session-state">{s.state.toLowerCase().replace(/_/g, ' ')}</span> : null}
    </div>
  );
}
