import { useState } from 'preact/hooks';
import { AgentField, useAgents } from './agents';
import { newKey, postOnce } from './api';
import { ErrorNote, Spinner } from './ui';

/**
 * Start a session on the task (POST /tasks/:id/sessions) with a chosen agent and a first prompt.
 * `restart`: the same form offered on a task left IN_PROGRESS without a live session (ADR 0025).
 * One Idempotency-Key per filled form: a double click or a retry after a lost answer launches one agent.
 */
export function StartSession({ taskId, defaultAgent, restart, done }: { taskId: string; defaultAgent: string | null; restart: boolean; done: () => void }) {
  const agents = useAgents();
  const [agent, setAgent] = useState(defaultAgent ?? '');
  const [prompt, setPrompt] = useState('');
  const [key, setKey] = useState(newKey);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setBusy(true);
    setError(null);
    try {
      const body = { ...(agent ? { agent } : {}), ...(prompt.trim() ? { prompt: prompt.trim() } : {}) };
      await postOnce(`/tasks/${taskId}/sessions`, body, key);
      setPrompt('');
      setKey(newKey());
      done();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="start-session" onSubmit={submit} aria-label={restart ? 'Restart the task' : 'Start a session'} data-testid="start-session">
      <div class="field">
        <label for={`agent-${taskId}`}>Agent</label>
        <AgentField id={`agent-${taskId}`} value={agent} onChange={(v) => (setAgent(v), setKey(newKey()))} agents={agents} />
      </div>
      <div class="field">
        <label for={`first-prompt-${taskId}`}>First prompt</label>
        <textarea
          id={`first-prompt-${taskId}`}
          rows={3}
          value={prompt}
          data-testid="first-prompt"
          placeholder="What the agent should do (optional: without it the agent waits for a prompt)"
          onInput={(e) => (setPrompt((e.target as HTMLTextAreaElement).value), setKey(newKey()))}
        />
      </div>
      <div class="controls">
        <button type="submit" class="btn primary" disabled={busy} data-testid={restart ? 'restart-task' : 'start-session-submit'}>
          {busy ? <Spinner /> : null}
          {restart ? 'Restart' : 'Start session'}
        </button>
      </div>
      <ErrorNote error={error} what={restart ? 'Restart' : 'Start session'} />
    </form>
  );
}
