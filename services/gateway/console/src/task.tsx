import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, get, post, qs } from './api';
import { hrefOf, useLive, useResync } from './app';
import { useWorkspaceLive } from './board';
import { ACTIVE, STATUS_WORDS, ago, applyPush, hasGap, holdBadge, kindWords, mergeMessages } from './model';
import { store, useStore } from './store';
import { TreePanel } from './tree-panel';
import { TreeView } from './tree';
import type { AuditEntry, Bundle, Message, Notification, Page, Permission, SessionDetail, TaskDetail, TaskItem } from './types';
import { ActionButton, Badge, ErrorNote, Spinner, useLoad } from './ui';

/** Call `fn` (debounced) for every push that concerns this task or session. */
function useTaskPushes(match: (n: Notification) => boolean, fn: (n: Notification) => void, deps: unknown[]) {
  const live = useLive();
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | null = null;
    let last: Notification | null = null;
    const off = live.onNotification((n) => {
      if (!match(n)) return;
      last = n;
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        fn(last!);
      }, 120);
    });
    return () => (off(), timer && clearTimeout(timer));
  }, deps);
}

export function TaskPage({ workspace, taskId }: { workspace: string; taskId: string }) {
  const live = useLive();
  const refused = useWorkspaceLive(workspace);
  // Without a workspace subscription the page still follows its own task.
  useEffect(() => (refused ? live.subscribe({ task_id: taskId }) : undefined), [refused, taskId]);
  // Walk up to the root: the tree is shown from there.
  const chain = useLoad(async () => {
    const path: string[] = [];
    let t = await get<TaskDetail>(`/tasks/${taskId}`);
    if (t.workspace_id !== workspace) throw new Error('this task belongs to another workspace');
    const seen = new Set([t.id]);
    while (t.parent_id && !seen.has(t.parent_id) && path.length < 64) {
      path.unshift(t.parent_id);
      t = await get<TaskDetail>(`/tasks/${t.parent_id}`);
      seen.add(t.id);
    }
    if (!store.tasks.has(t.id))
      store.upsert([
        { ...t, child_count: undefined as unknown as number, active_session_count: t.sessions.filter((s) => ACTIVE.includes(s.state)).length, hold: null },
      ]);
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

function TaskDetailView({ taskId, workspace }: { taskId: string; workspace: string }) {
  useStore();
  const resync = useResync();
  const task = useLoad(async () => {
    const [t, executions] = await Promise.all([
      get<TaskDetail>(`/tasks/${taskId}`),
      get<{ status: string; session_id: string }[]>(`/tasks/${taskId}/executions`).catch(() => [] as { status: string; session_id: string }[]),
    ]);
    return { t, executions };
  }, [taskId, resync]);
  useTaskPushes(
    (n) =>
      n.payload.task_id === taskId &&
      ['task.state_changed', 'session.state_changed', 'execution.stopped', 'session.agent.cancelled', 'tree_hold.created', 'tree_hold.released'].includes(
        n.action,
      ),
    () => task.reload(),
    [taskId],
  );
  const [picked, setPicked] = useState<string | null>(null);
  if (!task.value) return task.error ? <ErrorNote error={task.error} what="Task" /> : <Spinner label="Loading task" />;
  const { t, executions } = task.value;
  const sessions = [...t.sessions].sort((a, b) => (b.started_at ?? b.updated_at).localeCompare(a.started_at ?? a.updated_at));
  const current = sessions.find((s) => s.id === picked) ?? sessions.find((s) => ACTIVE.includes(s.state)) ?? sessions[0];
  const liveExec = executions.some((e) => ['STARTING', 'RUNNING', 'READY', 'STOPPING'].includes(e.status));
  const canStop = liveExec || sessions.some((s) => ACTIVE.includes(s.state));
  const badge = holdBadge(store.holdOf(t.id));
  return (
    <div class="detail">
      <section class="card head">
        <div class="head-row">
          <h1 data-testid="task-title">{t.title}</h1>
          <Badge kind={`status-${t.status.toLowerCase()}`}>
            <span data-testid="task-status">{STATUS_WORDS[t.status]}</span>
          </Badge>
          {badge ? <Badge kind={badge === 'Paused' ? 'paused' : 'cancelled'}>{badge}</Badge> : null}
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
          {current ? <SessionView key={current.id} sessionId={current.id} /> : null}
        </section>
      ) : (
        <section class="card">
          <h2>Sessions</h2>
          <p class="empty">No session yet. Start one with POST /tasks/{'{id}'}/sessions or a wakeup.</p>
        </section>
      )}
      <TreePanel task={t} hasChildren={(store.tasks.get(t.id) as TaskItem | undefined)?.child_count !== 0} />
      <Audit taskId={t.id} />
    </div>
  );
}

function SessionView({ sessionId }: { sessionId: string }) {
  const resync = useResync();
  const s = useLoad(() => get<SessionDetail>(`/sessions/${sessionId}`), [sessionId, resync]);
  useTaskPushes(
    (n) => n.payload.session_id === sessionId && n.action !== 'session.message',
    () => s.reload(),
    [sessionId],
  );
  if (!s.value) return s.error ? <ErrorNote error={s.error} what="Session" /> : <Spinner label="Loading session" />;
  const d = s.value;
  const lastTurn = d.turns[d.turns.length - 1];
  const turnOpen = !!lastTurn && lastTurn.completed_at === null;
  const canCancel = ACTIVE.includes(d.state) && (turnOpen || d.execution?.status === 'RUNNING');
  return (
    <div class="session" data-testid="session" data-state={d.state}>
      <p class="meta">
        State <strong data-testid="session-state">{d.state}</strong>
        {d.execution ? (
          <>
            {' '}
            · execution <strong data-testid="execution-status">{d.execution.status}</strong> ({d.execution.protocol}
            {d.execution.pid ? `, pid ${d.execution.pid}` : ''})
          </>
        ) : (
          ' · no live execution'
        )}
        {turnOpen ? (
          <span class="running" data-testid="turn-running">
            {' '}
            · <Spinner label="Turn running" /> turn running
          </span>
        ) : null}
      </p>
      {d.error_message ? <p class="note">{d.error_message}</p> : null}
      <ErrorNote error={s.error} what="Refreshing the session" />
      {canCancel ? (
        <div class="controls">
          <ActionButton
            testid="cancel-turn"
            title="Cancel the current turn; the agent stays up (POST /sessions/:id/cancel)"
            onClick={() => post(`/sessions/${sessionId}/cancel`).finally(s.reload)}
          >
            Cancel turn
          </ActionButton>
        </div>
      ) : null}
      <details class="turns">
        <summary>
          {d.turns.length} turn{d.turns.length === 1 ? '' : 's'}
        </summary>
        <ol>
          {d.turns.map((t) => (
            <li>
              {ago(t.started_at)} · {t.completed_at ? `ended: ${t.stop_reason ?? 'unknown'}` : 'in flight'}
            </li>
          ))}
        </ol>
      </details>
      <Transcript sessionId={sessionId} />
    </div>
  );
}

/** The transcript: read in pages (oldest first), then extended by `session.message` pushes as the agent talks. */
function Transcript({ sessionId }: { sessionId: string }) {
  const live = useLive();
  const resync = useResync();
  const [items, setItems] = useState<Message[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const itemsRef = useRef<Message[]>([]);
  const box = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  const paging = useRef(false);
  /** A catch-up asked for while one was paging: run once more when it ends, from just before the newest item. */
  const again = useRef(false);

  const set = (next: Message[]) => {
    itemsRef.current = next;
    setItems(next);
  };
  // Page from the last seq held until the server says there is no more. A pushed chunk for an item
  // not held yet makes `from` the seq before it.
  const catchUp = async (from?: number): Promise<void> => {
    if (paging.current) {
      // The page in flight may have been read before what this push announced: read again after it.
      again.current = true;
      return;
    }
    paging.current = true;
    again.current = false;
    try {
      for (let i = 0; i < 50; i++) {
        const last = itemsRef.current.length ? itemsRef.current[itemsRef.current.length - 1]!.seq : undefined;
        const after = i === 0 && from !== undefined ? from : last;
        const page = await get<Page<Message>>(`/sessions/${sessionId}/messages${qs({ after_seq: after, limit: 500 })}`);
        set(mergeMessages(itemsRef.current, page.items));
        if (!page.next_cursor || page.items.length === 0) break;
      }
      setError(null);
    } catch (e) {
      setError(e);
    } finally {
      paging.current = false;
      setLoading(false);
    }
    if (again.current) {
      const last = itemsRef.current[itemsRef.current.length - 1];
      await catchUp(last ? Math.max(0, last.seq - 1) : undefined);
    }
  };
  useEffect(() => void catchUp(), [sessionId, resync]);
  // When the session's turn or state moves, re-read the newest item whole: a streamed chunk pushed
  // while its item's page was in flight is then not lost.
  useTaskPushes(
    (n) => n.payload.session_id === sessionId && n.action !== 'session.message',
    () => {
      const last = itemsRef.current[itemsRef.current.length - 1];
      void catchUp(last ? Math.max(0, last.seq - 1) : undefined);
    },
    [sessionId],
  );
  useEffect(
    () =>
      live.onNotification((n) => {
        if (n.action !== 'session.message' || n.payload.session_id !== sessionId) return;
        const p = n.payload;
        const raw = (p.message ?? p.item ?? p) as Message & { op?: 'created' | 'appended' };
        if (typeof raw.seq !== 'number') return;
        const next = applyPush(itemsRef.current, raw);
        if (next === null) {
          // A chunk of an item not held, or after a chunk missed: read the item whole (from just before it).
          void catchUp(raw.seq - 1);
          return;
        }
        if (hasGap(itemsRef.current, raw)) void catchUp();
        // A page in flight may have been read before this push and would put the older text back: read again after it.
        else if (paging.current) again.current = true;
        set(next);
      }),
    [sessionId],
  );
  // Follow the newest line unless the operator scrolled up to read.
  useEffect(() => {
    const el = box.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [items]);
  const routeMissing = error instanceof ApiError && error.routeMissing;
  return (
    <div class="transcript-wrap">
      <h3>Transcript</h3>
      {routeMissing ? <p class="note">{(error as ApiError).message}</p> : <ErrorNote error={error} what="Transcript" />}
      <div
        class="transcript"
        ref={box}
        data-testid="transcript"
        tabIndex={0}
        aria-label="Session transcript"
        aria-live="polite"
        onScroll={(e) => {
          const el = e.target as HTMLDivElement;
          stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
        }}
      >
        {loading && items.length === 0 ? <Spinner label="Loading transcript" /> : null}
        {!loading && items.length === 0 && !error ? <p class="empty">Nothing said yet.</p> : null}
        {items.map((m) => (
          <div class={`msg msg-${m.role} kind-${m.kind}`} data-seq={m.seq} key={m.seq}>
            <span class="who">{kindWords(m.role, m.kind)}</span>
            <span class="text">{m.text}</span>
          </div>
        ))}
      </div>
    </div>
  );
}

function Permissions({ taskId }: { taskId: string }) {
  const resync = useResync();
  const list = useLoad(() => get<Permission[]>(`/tasks/${taskId}/permissions`), [taskId, resync]);
  useTaskPushes(
    (n) => n.payload.task_id === taskId && (n.action === 'permission.requested' || n.action === 'permission.closed'),
    () => list.reload(),
    [taskId],
  );
  if (list.error && !list.value) {
    const missing = list.error instanceof ApiError && list.error.routeMissing;
    return missing ? (
      <p class="note card">Permission requests: {(list.error as ApiError).message}</p>
    ) : (
      <ErrorNote error={list.error} what="Permission requests" />
    );
  }
  const items = list.value ?? [];
  const pending = items.filter((p) => p.status === 'pending');
  const closed = items.filter((p) => p.status !== 'pending');
  if (items.length === 0) return null;
  return (
    <section class={`card permissions${pending.length ? ' attention' : ''}`} aria-label="Permission requests">
      <h2>Permission requests {pending.length ? <span class="count">{pending.length} waiting</span> : null}</h2>
      {pending.map((p) => (
        <div class="permission" data-testid="permission" key={p.id}>
          <p class="ask">{p.title}</p>
          <p class="meta">asked {ago(p.created_at)}</p>
          <div class="controls">
            {p.options.map((o) => (
              <ActionButton
                kind={o.kind.startsWith('allow') ? 'primary' : 'plain'}
                testid={`permission-option-${o.option_id}`}
                onClick={() => post(`/permissions/${p.id}/respond`, { option_id: o.option_id }).finally(list.reload)}
              >
                {o.name}
              </ActionButton>
            ))}
            <ActionButton
              title="Answer the agent with a cancelled outcome"
              onClick={() => post(`/permissions/${p.id}/respond`, { cancelled: true }).finally(list.reload)}
            >
              Dismiss
            </ActionButton>
          </div>
        </div>
      ))}
      {closed.length ? (
        <details>
          <summary>{closed.length} answered or cancelled</summary>
          <ul class="history">
            {closed.map((p) => (
              <li>
                {p.title}:{' '}
                {p.status === 'answered' ? `answered “${p.options.find((o) => o.option_id === p.chosen_option_id)?.name ?? p.chosen_option_id}”` : 'cancelled'}{' '}
                {ago(p.closed_at)}
              </li>
            ))}
          </ul>
        </details>
      ) : null}
    </section>
  );
}

/** Pending clarification bundles of the task (GET /tasks/:id/clarifications, refreshed on `clarification.*` pushes). */
function Clarifications({ taskId }: { taskId: string }) {
  const resync = useResync();
  const list = useLoad(() => get<{ active: Bundle | null; bundles: Bundle[] }>(`/tasks/${taskId}/clarifications`), [taskId, resync]);
  useTaskPushes(
    (n) => n.payload.task_id === taskId && n.action.startsWith('clarification.'),
    () => list.reload(),
    [taskId],
  );
  if (list.error && !list.value) return <ErrorNote error={list.error} what="Questions" />;
  // Only the bundle an operator should answer: pending and not superseded by a newer turn.
  const pending = (list.value?.bundles ?? []).filter((b) => b.status === 'pending' && (b.active ?? !b.superseded));
  if (pending.length === 0) return null;
  return (
    <>
      {pending.map((b) => (
        <BundleView key={b.id} bundle={b} done={list.reload} />
      ))}
    </>
  );
}

function BundleView({ bundle, done }: { bundle: Bundle; done: () => void }) {
  const [answers, setAnswers] = useState<Record<string, string>>({});
  const open = bundle.questions.filter((q) => q.status === 'pending');
  const complete = open.every((q) => (answers[q.id] ?? '').trim() !== '');
  return (
    <section class="card questions attention" aria-label="Questions from the agent" data-testid="clarification">
      <div class="head-row">
        <h2>The agent asks</h2>
        <ActionButton
          kind="plain"
          testid="skip-questions"
          title="Reject every pending question; the agent continues without answers"
          onClick={() => post(`/clarification/${bundle.id}/respond`, { rejected: true }).finally(done)}
        >
          ✕ Skip all questions
        </ActionButton>
      </div>
      <form
        onSubmit={(e) => {
          e.preventDefault();
        }}
      >
        {bundle.questions.map((q) => (
          <fieldset class="question" disabled={q.status !== 'pending'}>
            <legend>{q.text}</legend>
            {q.status !== 'pending' ? (
              <p class="meta">
                {q.status}
                {q.answer ? `: ${q.answer}` : ''}
              </p>
            ) : q.options && q.options.length ? (
              q.options.map((o) => (
                <label class="option">
                  <input
                    type="radio"
                    name={`q-${bundle.id}-${q.id}`}
                    value={o}
                    checked={answers[q.id] === o}
                    onChange={() => setAnswers({ ...answers, [q.id]: o })}
                  />{' '}
                  {o}
                </label>
              ))
            ) : (
              <input
                type="text"
                aria-label={`Answer to: ${q.text}`}
                value={answers[q.id] ?? ''}
                onInput={(e) => setAnswers({ ...answers, [q.id]: (e.target as HTMLInputElement).value })}
              />
            )}
          </fieldset>
        ))}
        <ActionButton
          kind="primary"
          disabled={!complete || open.length === 0}
          onClick={() =>
            post(`/clarification/${bundle.id}/respond`, { answers: open.map((q) => ({ question_id: q.id, answer: answers[q.id]!.trim() })) }).finally(done)
          }
        >
          Send answers
        </ActionButton>
      </form>
    </section>
  );
}

function Audit({ taskId }: { taskId: string }) {
  const [open, setOpen] = useState(false);
  const resync = useResync();
  const list = useLoad(() => (open ? get<AuditEntry[] | { items: AuditEntry[] }>(`/tasks/${taskId}/audit`) : Promise.resolve(null)), [taskId, open, resync]);
  useTaskPushes(
    (n) => open && n.payload.task_id === taskId,
    () => list.reload(),
    [taskId, open],
  );
  const items = Array.isArray(list.value) ? list.value : (list.value?.items ?? []);
  return (
    <section class="card audit">
      <details onToggle={(e) => setOpen((e.target as HTMLDetailsElement).open)}>
        <summary>
          <h2>Audit trail</h2>
        </summary>
        <ErrorNote error={list.error} what="Audit trail" />
        {open && list.loading && !list.value ? <Spinner label="Loading audit trail" /> : null}
        {open && list.value && items.length === 0 ? <p class="empty">No control actions on this task yet.</p> : null}
        <table>
          <tbody>
            {items.map((a) => (
              <tr>
                <td class="when" title={a.created_at}>
                  {ago(a.created_at)}
                </td>
                <td>{a.action}</td>
                <td>{a.outcome}</td>
                <td class="actor">{a.actor}</td>
                <td>{a.reason ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </details>
    </section>
  );
}
