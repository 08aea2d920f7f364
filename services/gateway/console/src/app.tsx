import { createContext } from 'preact';
import { useContext, useEffect, useState } from 'preact/hooks';
import { ApiError, api, get, qs } from './api';
import { askOtherTabs, onSignedOut, signOut, token } from './auth';
import { Board } from './board';
import { InboxLink, InboxPage, InboxProvider } from './inbox';
import { NewWorkspaceForm, WORKSPACES_CHANGED } from './create-forms';
import { Live, type LiveState } from './live';
import { store } from './store';
import { TaskPage } from './task';
import type { Workspace, WorkspacePage } from '@kandev/contracts';
import { ErrorNote, errorText, useLoad } from './ui';

const LiveContext = createContext<Live | null>(null);
export const useLive = () => useContext(LiveContext)!;

/** Bumped after /ws reconnects: views re-read what they show (pushes have no replay). */
const ResyncContext = createContext(0);
export const useResync = () => useContext(ResyncContext);

type Route = { workspace: string | null; task: string | null; inbox: boolean };
function parseHash(): Route {
  const m = /^#\/w\/([^/]+)(?:\/t\/([^/]+)|\/(inbox))?/.exec(location.hash);
  return { workspace: m ? decodeURIComponent(m[1]!) : null, task: m?.[2] ? decodeURIComponent(m[2]) : null, inbox: m?.[3] === 'inbox' };
}
export const hrefOf = (workspace: string, task?: string) => `#/w/${encodeURIComponent(workspace)}${task ? `/t/${encodeURIComponent(task)}` : ''}`;

export function App() {
  // undefined: asking the other tabs for their sign-in (ADR 0058), before the form is shown.
  const [tok, setTok] = useState<string | null | undefined>(token.get() ?? undefined);
  useEffect(() => onSignedOut(() => setTok(null)), []);
  useEffect(() => {
    if (tok === undefined) void askOtherTabs().then(setTok);
  }, []);
  if (tok === undefined) return null;
  if (!tok) return <SignIn onSignedIn={(t) => (token.set(t), setTok(t))} />;
  return <Shell tok={tok} signOut={signOut} />;
}

function SignIn({ onSignedIn }: { onSignedIn: (t: string) => void }) {
  const [value, setValue] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const t = value.trim();
    if (!t) return;
    setBusy(true);
    setError(null);
    try {
      // A cheap authenticated read proves the token before the console keeps it.
      await api('GET', `/workspaces${qs({ limit: 1 })}`, undefined, {}, t);
      onSignedIn(t);
    } catch (err: any) {
      // A gateway without GET /workspaces still lets a valid token in (typing a workspace id works).
      if (err?.routeMissing) onSignedIn(t);
      else setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <form onSubmit={submit} class="card">
        <h1>Kandev operator console</h1>
        <label for="token">Operator token</label>
        <textarea
          id="token"
          rows={4}
          value={value}
          onInput={(e) => setValue((e.target as HTMLTextAreaElement).value)}
          placeholder="eyJhbGciOi…"
          autoFocus
          spellcheck={false}
        />
        <p class="hint">
          Print one with <code>npm run token -- operator</code>. It is kept for this browser session only (sessionStorage), and handed to the console's other
          tabs you open.
        </p>
        <button type="submit" class="btn primary" disabled={busy || !value.trim()}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
        <ErrorNote error={error} />
      </form>
    </main>
  );
}

function Shell({ tok, signOut }: { tok: string; signOut: () => void }) {
  const [route, setRoute] = useState(parseHash());
  const [live, setLive] = useState<Live | null>(null);
  const [liveState, setLiveState] = useState<LiveState>('connecting');
  const [resync, setResync] = useState(0);
  useEffect(() => {
    const onHash = () => setRoute(parseHash());
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  useEffect(() => {
    const l = new Live(tok);
    setLive(l);
    const offState = l.onState((s, again) => {
      setLiveState(s);
      if (again) setResync((n) => n + 1);
    });
    const offN = l.onNotification((n) => store.apply(n));
    return () => (offState(), offN(), l.close());
  }, [tok]);
  if (!live) return null;
  const page = (
    <>
      <header class="top">
        <a class="brand" href="#/">
          Kandev
        </a>
        <WorkspacePicker current={route.workspace} />
        {route.workspace ? <InboxLink key={route.workspace} workspace={route.workspace} /> : null}
        <span class={`conn conn-${liveState}`} data-testid="live-state" title="The /ws connection that keeps this page current">
          {liveState === 'live' ? 'Live' : liveState === 'connecting' ? 'Connecting…' : 'Offline, reconnecting…'}
        </span>
        <button type="button" class="btn plain" onClick={signOut}>
          Sign out
        </button>
      </header>
      {route.workspace ? (
        route.inbox ? (
          <InboxPage key={route.workspace} workspace={route.workspace} />
        ) : route.task ? (
          <TaskPage key={route.task} workspace={route.workspace} taskId={route.task} />
        ) : (
          <Board key={route.workspace} workspace={route.workspace} />
        )
      ) : (
        <main class="page">
          <Welcome />
        </main>
      )}
    </>
  );
  return (
    <LiveContext.Provider value={live}>
      <ResyncContext.Provider value={resync}>
        {route.workspace ? (
          <InboxProvider key={route.workspace} workspace={route.workspace}>
            {page}
          </InboxProvider>
        ) : (
          page
        )}
      </ResyncContext.Provider>
    </LiveContext.Provider>
  );
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function WorkspacePicker({ current }: { current: string | null }) {
  const resync = useResync();
  const [pages, setPages] = useState<Workspace[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [typed, setTyped] = useState('');
  const first = useLoad(() => get<WorkspacePage>(`/workspaces${qs({ limit: 100 })}`), [resync]);
  useEffect(() => {
    addEventListener(WORKSPACES_CHANGED, first.reload);
    return () => removeEventListener(WORKSPACES_CHANGED, first.reload);
  }, []);
  useEffect(() => {
    if (first.value) {
      setPages(first.value.items);
      setCursor(first.value.next_cursor);
    }
  }, [first.value]);
  const more = async () => {
    const p = await get<WorkspacePage>(`/workspaces${qs({ limit: 100, cursor })}`);
    setPages((have) => [...have, ...p.items]);
    setCursor(p.next_cursor);
  };
  const go = (id: string) => {
    if (id) location.hash = hrefOf(id);
  };
  const known = pages.some((w) => w.id === current);
  return (
    <div class="picker">
      <label for="ws-select" class="sr-only">
        Workspace
      </label>
      {pages.length > 0 ? (
        <select id="ws-select" value={current ?? ''} onChange={(e) => go((e.target as HTMLSelectElement).value)} data-testid="workspace-select">
          <option value="" disabled>
            Choose a workspace…
          </option>
          {pages.map((w) => (
            <option value={w.id}>{w.name}</option>
          ))}
          {current && !known ? <option value={current}>{current.slice(0, 8)}… (typed)</option> : null}
        </select>
      ) : null}
      {cursor ? (
        <button type="button" class="btn plain small" onClick={more}>
          More workspaces
        </button>
      ) : null}
      <form
        class="typed"
        onSubmit={(e) => {
          e.preventDefault();
          if (UUID.test(typed.trim())) go(typed.trim());
        }}
      >
        <label for="ws-id" class="sr-only">
          Workspace id
        </label>
        <input id="ws-id" placeholder="or paste a workspace id" value={typed} onInput={(e) => setTyped((e.target as HTMLInputElement).value)} size={22} />
        <button type="submit" class="btn plain small" disabled={!UUID.test(typed.trim())}>
          Open
        </button>
      </form>
      {first.error ? (
        <span class="picker-error" role="alert">
          {first.error instanceof ApiError && first.error.routeMissing ? 'This gateway cannot list workspaces; paste a workspace id.' : errorText(first.error)}
        </span>
      ) : null}
    </div>
  );
}

function Welcome() {
  return (
    <section class="card welcome">
      <h1>Choose a workspace</h1>
      <p>Pick a workspace above (or paste its id) to see its board of tasks, or create one:</p>
      <NewWorkspaceForm />
    </section>
  );
}
