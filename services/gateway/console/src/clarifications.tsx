import { useState } from 'preact/hooks';
import { get, post } from './api';
import { useResync } from './app';
import { useTaskPushes } from './task-pushes';
import type { ClarificationBundleView, TaskClarifications } from '@kandev/contracts';
import { ActionButton, ErrorNote, Expiry, useLoad } from './ui';

/** Pending clarification bundles of the task (GET /tasks/:id/clarifications, refreshed on `clarification.*` pushes). */
export function Clarifications({ taskId }: { taskId: string }) {
  const resync = useResync();
  const list = useLoad(() => get<TaskClarifications>(`/tasks/${taskId}/clarifications`), [taskId, resync]);
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

/** One question bundle, answered in place or skipped (also used by the Inbox, whose list line shows the expiry). */
export function BundleView({ bundle, done, expiry = true }: { bundle: ClarificationBundleView; done: () => void; expiry?: boolean }) {
  const [answers, setAnswers] = useState<Record<string, string>>({});
  const open = bundle.questions.filter((q) => q.status === 'pending');
  const complete = open.every((q) => (answers[q.id] ?? '').trim() !== '');
  return (
    <section class="card questions attention" aria-label="Questions from the agent" data-testid="clarification">
      <div class="head-row">
        <h2>The agent asks</h2>
        {expiry ? <Expiry at={bundle.expires_at} /> : null}
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
