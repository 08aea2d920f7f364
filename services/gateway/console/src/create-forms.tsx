import { useState } from 'preact/hooks';
import { AgentField, useAgents } from './agents';
import { newKey, post, postOnce } from './api';
import { hrefOf } from './app';
import type { Task, Workspace } from '@kandev/contracts';
import { ErrorNote, Spinner } from './ui';

/** Fired on window when this console created a workspace. */
export const WORKSPACES_CHANGED = 'kandev:workspaces-changed';

/** POST /workspaces, then open the new workspace's board. */
export function NewWorkspaceForm() {
  const [name, setName] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  return (
    <form
      class="inline-form"
      aria-label="New workspace"
      onSubmit={async (e) => {
        e.preventDefault();
        if (!name.trim() || busy) return;
        setBusy(true);
        setError(null);
        try {
          const w = await post<Workspace>('/workspaces', { name: name.trim() });
          setName('');
          // The header's picker lists it too (it reads the workspaces once otherwise).
          dispatchEvent(new Event(WORKSPACES_CHANGED));
          location.hash = hrefOf(w.id);
        } catch (err) {
          setError(err);
        } finally {
          setBusy(false);
        }
      }}
    >
      <label for="new-workspace">New workspace name</label>
      <input
        id="new-workspace"
        value={name}
        placeholder="Name"
        onInput={(e) => setName((e.target as HTMLInputElement).value)}
        data-testid="new-workspace-name"
      />
      <button type="submit" class="btn primary small" disabled={busy || !name.trim()}>
        {busy ? <Spinner /> : null}Create
      </button>
      <ErrorNote error={error} what="New workspace" />
    </form>
  );
}

/**
 * POST /tasks: a task with a title, an optional parent (a subtask) and an optional agent. `parents`
 * are the tasks offered as parent (the board's roots); `parentId` fixes it (a task page's "Add subtask").
 */
export function NewTaskForm(props: { workspace: string; parents?: { id: string; title: string }[]; parentId?: string; created?: (t: Task) => void }) {
  const agents = useAgents();
  const [title, setTitle] = useState('');
  const [parent, setParent] = useState(props.parentId ?? '');
  const [agent, setAgent] = useState('');
  const [key, setKey] = useState(newKey);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const id = props.parentId ? `sub-${props.parentId}` : 'new-task';
  return (
    <form
      class="new-task"
      aria-label={props.parentId ? 'Add a subtask' : 'New task'}
      data-testid={props.parentId ? 'new-subtask' : 'new-task'}
      onSubmit={async (e) => {
        e.preventDefault();
        if (!title.trim() || busy) return;
        setBusy(true);
        setError(null);
        try {
          const body = { workspace_id: props.workspace, title: title.trim(), ...(parent ? { parent_id: parent } : {}), ...(agent ? { agent } : {}) };
          // The same key for the same form: a retried create makes one task.
          const t = await postOnce<Task>('/tasks', body, key);
          setTitle('');
          setKey(newKey());
          props.created?.(t);
        } catch (err) {
          setError(err);
        } finally {
          setBusy(false);
        }
      }}
    >
      <div class="field">
        <label for={`${id}-title`}>{props.parentId ? 'Subtask title' : 'Task title'}</label>
        <input id={`${id}-title`} value={title} onInput={(e) => (setTitle((e.target as HTMLInputElement).value), setKey(newKey()))} />
      </div>
      {props.parentId ? null : (
        <div class="field">
          <label for={`${id}-parent`}>Parent</label>
          <select id={`${id}-parent`} value={parent} onChange={(e) => (setParent((e.target as HTMLSelectElement).value), setKey(newKey()))}>
            <option value="">None (a root task)</option>
            {(props.parents ?? []).map((p) => (
              <option value={p.id}>{p.title}</option>
            ))}
          </select>
        </div>
      )}
      <div class="field">
        <label for={`${id}-agent`}>Agent</label>
        <AgentField id={`${id}-agent`} value={agent} onChange={(v) => (setAgent(v), setKey(newKey()))} agents={agents} />
      </div>
      <button type="submit" class="btn primary" disabled={busy || !title.trim()}>
        {busy ? <Spinner /> : null}
        {props.parentId ? 'Add subtask' : 'Create task'}
      </button>
      <ErrorNote error={error} what="New task" />
    </form>
  );
}
