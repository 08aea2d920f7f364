import { ApiError, get, post } from './api';
import { useResync } from './app';
import { ago } from './model';
import { useTaskPushes } from './task-pushes';
import type { PermissionRequest } from '@kandev/contracts';
import { ActionButton, ErrorNote, useLoad } from './ui';

/** The task's permission requests: pending ones answered in place, the rest folded away. */
export function Permissions({ taskId }: { taskId: string }) {
  const resync = useResync();
  const list = useLoad(() => get<PermissionRequest[]>(`/tasks/${taskId}/permissions`), [taskId, resync]);
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
        <PendingPermission key={p.id} p={p} done={list.reload} />
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

/** One pending permission request with the agent's options and Dismiss (also used by the Inbox). */
export function PendingPermission({ p, done }: { p: PermissionRequest; done: () => void }) {
  return (
    <div class="permission" data-testid="permission">
      <p class="ask">{p.title}</p>
      <p class="meta">asked {ago(p.created_at)}</p>
      <div class="controls">
        {p.options.map((o) => (
          <ActionButton
            kind={o.kind.startsWith('allow') ? 'primary' : 'plain'}
            testid={`permission-option-${o.option_id}`}
            onClick={() => post(`/permissions/${p.id}/respond`, { option_id: o.option_id }).finally(done)}
          >
            {o.name}
          </ActionButton>
        ))}
        <ActionButton title="Answer the agent with a cancelled outcome" onClick={() => post(`/permissions/${p.id}/respond`, { cancelled: true }).finally(done)}>
          Dismiss
        </ActionButton>
      </div>
    </div>
  );
}
