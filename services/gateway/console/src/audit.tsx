import { useState } from 'preact/hooks';
import { get } from './api';
import { useResync } from './app';
import { ago } from './model';
import { useTaskPushes } from './task-pushes';
import type { AuditEntry } from '@kandev/contracts';
import { ErrorNote, Spinner, useLoad } from './ui';

/** The task's control actions (B-3), read only while opened. */
export function Audit({ taskId }: { taskId: string }) {
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
