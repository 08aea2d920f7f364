import { useEffect, useState } from 'preact/hooks';
import { get, post, qs } from './api';
import { hrefOf, useLive, useResync } from './app';
import { Audit } from './audit';
import { useWorkspaceLive } from './board';
import { Clarifications } from './clarifications';
import { NewTaskForm } from './create-forms';
import { ACTIVE, STATUS_WORDS, ago, holdBadge, needsAttention } from './model';
import { Permissions } from './permissions';
import { QueueCard } from './queue';
import { SessionView } from './session-view';
import { StartSession } from './start-session';
import { store, useStore } from './store';
import { useTaskPushes } from './task-pushes';
import { TreePanel } from './tree-panel';
import { TreeView } from './tree';
import type { TaskPage as TaskRows, TaskListItem, TaskWithSessions } from '@kandev/contracts';
import { ActionButton, Badge, ErrorNote, Spinner, useLoad } from './ui';

/**
 * The root's row for the tree and the store, from GET /tasks/:id (which carries the hold): its Paused /
 * Cancelled (tree) badge from any entry point, a reload or a link. The child count stays what a list
 * row said (the tree reads the root's children itself).
 */
function rootRow({ sessions, ...task }: TaskWithSessions): TaskListItem {
  return {
    ...task,
    child_count: store.tasks.get(task.id)?.child_count ?? 0,
    active_session_count: sessions.filter((s) => ACTIVE.includes(s.state)).length,
  };
}

export function TaskPage({ workspace, taskId }: { workspace: string; taskId: string }) {
  const live = useLive();
  const refused = useWorkspaceLive(workspace);
  // Without a workspace subscription the page still follows its own task.
  useEffect(() => (refused ? live.subscribe({ task_id: taskId }) : undefined), [refused, taskId]);
  // Walk up to the root: the tree is shown from there.
  const chain = useLoad(async () => {
    const path: string[] = [];
    let t = await get<TaskWithSessions>(`/tasks/${taskId}`);
    if (t.workspace_id !== workspace) throw new Error('this task belongs to another workspace');
    const seen = new Set([t.id]);
    while (t.parent_id && !seen.has(t.parent_id) && path.length < 64) {
      path.unshift(t.parent_id);
      t = await get<TaskWithSessions>(`/tasks/${t.parent_id}`);
      seen.add(t.id);
    }
    store.upsert([rootRow(t)]);
    return { rootId: t.id, path };
  }, [taskId]);
  return (
    <main class="page task-page">
      <nav class="crumbs">
        <a href={hrefOf(workspace)}>← Board</a>
      </nav>
      <div class="task-grid">
        <div class="left">
          {chain.value ? (
            <TreeView workspace={workspace} rootId={chain.value.rootId} path={chain.value.path} selected={taskId} />
          ) : chain.error ? (
            <ErrorNote error={chain.error} what="Task tree" />
          ) : (
            <Spinner label="Loading tree" />
          )}
        </div>
        <div class="right">
          <TaskDetailView taskId={taskId} workspace={workspace} />
        </div>
      </div>
    </main>
  );
}

const LIVE_EXECUTION = ['STARTING', 'RUNNING', 'READY', 'STOPPING'];

function TaskDetailView({ taskId, workspace }: { taskId: string; workspace: string }) {
  useStore();
  const resync = useResync();
  const task = useLoad(async () => {
    const [t, executions, children] = await Promise.all([
      get<TaskWithSessions>(`/tasks/${taskId}`),
      get<{ status: string; session_id: string }[]>(`/tasks/${taskId}/executions`).catch(() => [] as { status: string; session_id: string }[]),
      // Whether the task has subtasks decides the tree controls and the cost card (one row is enough).
      get<TaskRows>(`/tasks${qs({ workspace_id: workspace, parent_id: taskId, limit: 1 })}`).catch(() => null),
    ]);
    return { t, executions, hasChildren: (children?.items.length ?? 0) > 0 };
  }, [taskId, resync]);
  useTaskPushes(
    (n) =>
      (n.payload.task_id === taskId &&
        [
          'task.state_changed',
          'task.attention',
          'session.state_changed',
          'execution.stopped',
          'session.agent.cancelled',
          'tree_hold.created',
          'tree_hold.released',
        ].includes(n.action)) ||
      (n.action === 'task.created' && n.payload.task.parent_id === taskId),
    () => task.reload(),
    [taskId],
  );
  const [picked, setPicked] = useState<string | null>(null);
  if (!task.value) return task.error ? <ErrorNote error={task.error} what="Task" /> : <Spinner label="Loading task" />;
  const { t, executions, hasChildren } = task.value;
  const sessions = [...t.sessions].sort((a, b) => (b.started_at ?? b.updated_at).localeCompare(a.started_at ?? a.updated_at));
  const current = sessions.find((s) => s.id === picked) ?? sessions.find((s) => ACTIVE.includes(s.state)) ?? sessions[0];
  const liveExec = executions.some((e) => LIVE_EXECUTION.includes(e.status));
  const hasLiveSession = sessions.some((s) => ACTIVE.includes(s.state));
  const canStop = liveExec || hasLiveSession;
  const hold = store.holdOf(t.id);
  // A held task is meant to be idle: Resume or Restore is its next step, not a restart.
  const attention = !hold && needsAttention(t.status, hasLiveSession || liveExec);
  const badge = holdBadge(hold);
  return (
    <div class="detail">
      <section class={`card head${attention ? ' attention' : ''}`}>
        <div class="head-row">
          <h1 data-testid="task-title">{t.title}</h1>
          <Badge kind={`status-${t.status.toLowerCase()}`}>
            <span data-testid="task-status">{STATUS_WORDS[t.status]}</span>
          </Badge>
          {badge ? (
            <Badge kind={badge === 'Paused' ? 'paused' : 'cancelled'}>
              <span data-testid="task-hold-badge">{badge}</span>
            </Badge>
          ) : null}
          {attention ? (
            <Badge kind="attention">
              <span data-testid="attention-badge" title="In progress, but no agent session is live: restart it or move the card">
                Needs attention
              </span>
            </Badge>
          ) : null}
          {t.archived_at ? <Badge kind="archived">Archived</Badge> : null}
        </div>
        <p class="meta">
          {t.agent ? <>Agent {t.agent} · </> : null}created {ago(t.created_at)} · updated {ago(t.updated_at)}
          {t.parent_id ? (
            <>
              {' '}
              · <a href={hrefOf(workspace, t.parent_id)}>parent task</a>
            </>
          ) : null}
        </p>
        <ErrorNote error={task.error} what="Refreshing the task" />
        <div class="controls">
          {canStop ? (
            <ActionButton
              kind="danger"
              testid="stop-task"
              title="Stop every live agent process of this task (POST /tasks/:id/stop)"
              onClick={() => post(`/tasks/${t.id}/stop`).finally(task.reload)}
            >
              Stop
            </ActionButton>
          ) : null}
        </div>
        {attention ? (
          <>
            <p class="note">This task is in progress but no agent works on it (a resume or restore, or an agent that ended). Restart it:</p>
            <StartSession taskId={t.id} defaultAgent={sessions[0]?.agent ?? t.agent} restart done={task.reload} />
          </>
        ) : null}
      </section>
      <Clarifications taskId={t.id} />
      <Permissions taskId={t.id} />
      {sessions.length > 0 ? (
        <section class="card sessions">
          <h2>Sessions</h2>
          <div class="session-tabs" role="tablist">
            {sessions.map((s) => (
              <button
                type="button"
                role="tab"
                aria-selected={s.id === current?.id}
                class={`tab${s.id === current?.id ? ' active' : ''}`}
                onClick={() => setPicked(s.id)}
              >
                {s.agent ?? 'session'} · <span class={`state state-${s.state.toLowerCase()}`}>{s.state.toLowerCase().replace(/_/g, ' ')}</span>
                {s.started_at ? <span class="when"> {ago(s.started_at)}</span> : null}
              </button>
            ))}
          </div>
          {current ? <SessionView key={current.id} sessionId={current.id} taskId={t.id} /> : null}
        </section>
      ) : null}
      {!hasLiveSession && !attention && t.status !== 'CANCELLED' && !hold ? (
        <section class="card">
          <h2>{sessions.length ? 'Start another session' : 'Start a session'}</h2>
          <StartSession taskId={t.id} defaultAgent={t.agent} restart={false} done={task.reload} />
        </section>
      ) : null}
      <QueueCard taskId={t.id} sessionIdle={sessions.some((s) => s.state === 'WAITING_FOR_INPUT')} />
      <TreePanel task={t} hasChildren={hasChildren} />
      <section class="card">
        <details>
          <summary>
            <h2 class="inline">Add a subtask</h2>
          </summary>
          <NewTaskForm workspace={workspace} parentId={t.id} />
        </details>
      </section>
      <Audit taskId={t.id} />
    </div>
  );
}
