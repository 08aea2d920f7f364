import { useState } from 'preact/hooks';
import { post } from './api';
import { ErrorNote, Spinner } from './ui';

type Delivery = 'queued' | 'interrupt';

/**
 * The operator's prompt to a live session. Idle: the prompt starts the next turn now
 * (POST /sessions/:id/prompt). A turn running: "Queued" waits behind it in the task's queue
 * (POST /tasks/:id/queue); "Interrupt" cancels the turn and sends this prompt in its place (the seed's
 * "cancel, then send the replacement prompt", as one action).
 */
export function PromptBox({ taskId, sessionId, turnRunning, done }: { taskId: string; sessionId: string; turnRunning: boolean; done: () => void }) {
  const [text, setText] = useState('');
  const [delivery, setDelivery] = useState<Delivery>('queued');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [said, setSaid] = useState<string | null>(null);
  const send = async (e: Event) => {
    e.preventDefault();
    const prompt = text.trim();
    if (!prompt || busy) return;
    setBusy(true);
    setError(null);
    setSaid(null);
    try {
      if (!turnRunning) {
        await post(`/sessions/${sessionId}/prompt`, { prompt });
        setSaid('Sent.');
      } else if (delivery === 'queued') {
        const m = await post<{ delivered: boolean }>(`/tasks/${taskId}/queue`, { prompt });
        setSaid(m.delivered ? 'Sent.' : 'Queued behind the running turn.');
      } else {
        // The cancel answers once the turn has ended, so the session is idle for the prompt.
        await post(`/sessions/${sessionId}/cancel`, { reason: 'interrupted by the operator' });
        await post(`/sessions/${sessionId}/prompt`, { prompt });
        setSaid('Interrupted the turn and sent.');
      }
      setText('');
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
      done();
    }
  };
  const label = !turnRunning ? 'Send' : delivery === 'queued' ? 'Queue' : 'Interrupt and send';
  return (
    <form class="prompt-box" onSubmit={send} aria-label="Prompt the agent">
      <label for={`prompt-${sessionId}`}>Prompt</label>
      <textarea
        id={`prompt-${sessionId}`}
        rows={3}
        value={text}
        data-testid="prompt-input"
        placeholder={turnRunning ? 'The agent is in a turn: queue this, or interrupt it' : 'Tell the agent what to do next'}
        onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
        onKeyDown={(e) => {
          // Ctrl/Cmd+Enter sends, as in most chat boxes; Enter alone is a new line.
          if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) void send(e);
        }}
      />
      <div class="controls">
        {turnRunning ? (
          <fieldset class="delivery">
            <legend class="sr-only">Delivery</legend>
            <label>
              <input type="radio" name={`delivery-${sessionId}`} checked={delivery === 'queued'} onChange={() => setDelivery('queued')} /> Queued
            </label>
            <label>
              <input type="radio" name={`delivery-${sessionId}`} checked={delivery === 'interrupt'} onChange={() => setDelivery('interrupt')} /> Interrupt
            </label>
          </fieldset>
        ) : null}
        <button
          type="submit"
          class={`btn ${turnRunning && delivery === 'interrupt' ? 'danger' : 'primary'}`}
          disabled={busy || !text.trim()}
          data-testid="prompt-send"
        >
          {busy ? <Spinner /> : null}
          {label}
        </button>
        {said ? (
          <span class="meta" role="status">
            {said}
          </span>
        ) : null}
      </div>
      <ErrorNote error={error} what="Prompt" />
    </form>
  );
}
