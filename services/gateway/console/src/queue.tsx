import { del, get, post } from './api';
import { useResync } from './app';
import { ago } from './model';
import { useTaskPushes } from './task-pushes';
import type { QueuedMessage } from '@kandev/contracts';
import { ActionButton, ErrorNote, useLoad } from './ui';

/**
 * The task's message queue: what waits for its session, oldest first, with delete and
 * resume. After a Cancel turn the queue waits for the operator: messages that stay queued
 * while the session is idle are that case, and "Resume queue" lets them run.
 */
export function QueueCard({ taskId, sessionIdle }: { taskId: string; sessionIdle: boolean }) {
  const resync = useResync();
  const queue = useLoad(() => get<QueuedMessage[]>(`/tasks/${taskId}/queue`), [taskId, resync]);
  useTaskPushes(
    (n) => n.payload.task_id === taskId && (n.action === 'queue.changed' || n.action === 'session.state_changed'),
    () => queue.reload(),
    [taskId],
  );
  const items = queue.value ?? [];
  if (items.length === 0 && !queue.error) return null;
  return (
    <section class={`card queue${sessionIdle && items.length ? ' attention' : ''}`} aria-label="Message queue" data-testid="queue">
      <div class="head-row">
        <h2>
          Queue <span class="count">{items.length} waiting</span>
        </h2>
        <ActionButton
          kind="primary"
          testid="resume-queue"
          title="Let the queued messages run (POST /tasks/:id/queue/resume)"
          onClick={() => post(`/tasks/${taskId}/queue/resume`).finally(queue.reload)}
        >
          Resume queue
        </ActionButton>
      </div>
      {sessionIdle && items.length ? (
        <p class="note" data-testid="queue-paused">
          The session is idle and these wait: a Cancel turn paused the queue until you resume it.
        </p>
      ) : null}
      <ErrorNote error={queue.error} what="Queue" />
      <ol class="queue-items">
        {items.map((m) => (
          <li data-testid="queued-message" key={m.id}>
            <span class="text">{m.prompt.length > 300 ? `${m.prompt.slice(0, 300)}…` : m.prompt}</span>
            <span class="meta">
              {' '}
              queued {ago(m.queued_at)} by {m.queued_by}
            </span>{' '}
            <ActionButton
              kind="plain"
              title="Remove this message unsent"
              testid="delete-queued"
              onClick={() => del(`/tasks/${taskId}/queue/${m.id}`).finally(queue.reload)}
            >
              Delete
            </ActionButton>
          </li>
        ))}
      </ol>
    </section>
  );
}
