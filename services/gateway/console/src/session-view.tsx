import { get, post } from './api';
import { useResync } from './app';
import { ACTIVE, ago } from './model';
import { PromptBox } from './prompt-box';
import { useTaskPushes } from './task-pushes';
import { Transcript } from './transcript';
import type { SessionDetail } from '@kandev/contracts';
import { ActionButton, ErrorNote, Spinner, useLoad } from './ui';

/** One session: its state and execution, Cancel turn, the prompt box while the agent lives, turns and transcript. */
export function SessionView({ sessionId, taskId }: { sessionId: string; taskId: string }) {
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
      {ACTIVE.includes(d.state) && d.execution ? (
        <PromptBox taskId={taskId} sessionId={sessionId} turnRunning={turnOpen || d.state === 'RUNNING'} done={s.reload} />
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
