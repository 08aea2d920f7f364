import type { ComponentChildren } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api';
import { expiryWords } from './model';

export function errorText(e: unknown): string {
  if (e instanceof ApiError) return e.message;
  return `Something went wrong in the console: ${e instanceof Error ? e.message : String(e)}`;
}

export function ErrorNote({ error, what }: { error: unknown; what?: string }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {what ? <strong>{what}: </strong> : null}
      {errorText(error)}
    </p>
  );
}

export const Spinner = ({ label = 'Working' }: { label?: string }) => <span class="spinner" role="status" aria-label={label} />;

/** A button whose action is async: disabled with a spinner while in flight; a failure is shown beside it. */
export function ActionButton(props: {
  onClick: () => Promise<unknown>;
  children: ComponentChildren;
  kind?: 'primary' | 'danger' | 'plain';
  disabled?: boolean;
  title?: string;
  testid?: string;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const mounted = useRef(true);
  useEffect(() => () => void (mounted.current = false), []);
  const run = async () => {
    setBusy(true);
    setError(null);
    try {
      await props.onClick();
    } catch (e) {
      if (mounted.current) setError(e);
    } finally {
      if (mounted.current) setBusy(false);
    }
  };
  return (
    <span class="action">
      <button
        type="button"
        class={`btn ${props.kind ?? 'plain'}`}
        disabled={busy || props.disabled}
        aria-busy={busy}
        title={props.title}
        data-testid={props.testid}
        onClick={run}
      >
        {busy ? <Spinner /> : null}
        {props.children}
      </button>
      {error ? <ErrorNote error={error} /> : null}
    </span>
  );
}

export function Badge({ kind, children }: { kind: string; children: ComponentChildren }) {
  return <span class={`badge badge-${kind}`}>{children}</span>;
}

const FOCUSABLE = 'button:not([disabled]), [href], input:not([disabled]), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex="-1"])';

/** A modal dialog: focus moves in, Tab cycles inside it, Escape closes, focus returns where it was. */
export function Dialog(props: { title: string; onClose: () => void; children: ComponentChildren }) {
  const ref = useRef<HTMLDivElement>(null);
  // A layout effect, not useEffect: Preact runs plain effects after the next paint, so a key pressed as soon as the
  // dialog shows (Escape on a busy machine) would reach a page with no handler yet and the dialog would stay open.
  useLayoutEffect(() => {
    const before = document.activeElement as HTMLElement | null;
    const box = ref.current!;
    (box.querySelector<HTMLElement>('[data-autofocus]') ?? box.querySelector<HTMLElement>(FOCUSABLE) ?? box).focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') {
        e.preventDefault();
        props.onClose();
        return;
      }
      if (e.key !== 'Tab') return;
      const items = [...box.querySelectorAll<HTMLElement>(FOCUSABLE)];
      if (items.length === 0) return;
      const first = items[0]!;
      const last = items[items.length - 1]!;
      if (e.shiftKey && document.activeElement === first) {
        e.preventDefault();
        last.focus();
      } else if (!e.shiftKey && document.activeElement === last) {
        e.preventDefault();
        first.focus();
      }
    };
    document.addEventListener('keydown', onKey);
    return () => {
      document.removeEventListener('keydown', onKey);
      before?.focus?.();
    };
  }, []);
  return (
    <div class="backdrop" onClick={(e) => e.target === e.currentTarget && props.onClose()}>
      <div class="dialog" role="dialog" aria-modal="true" aria-labelledby="dialog-title" ref={ref} tabIndex={-1}>
        <h2 id="dialog-title">{props.title}</h2>
        {props.children}
      </div>
    </div>
  );
}

/** Run an async load; re-run when deps change. Keeps the last value while reloading. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { value: T | undefined; error: unknown; loading: boolean; reload: () => void } {
  const [state, setState] = useState<{ value: T | undefined; error: unknown; loading: boolean }>({ value: undefined, error: null, loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (value) => live && setState({ value, error: null, loading: false }),
      (error) => live && setState((s) => ({ value: s.value, error, loading: false })),
    );
    return () => void (live = false);
  }, [...deps, tick]);
  return { ...state, reload: () => setTick((t) => t + 1) };
}

/**
 * When a question bundle expires, counting down once a second, in words (not colour only); the clock
 * time in the tooltip. A timer role: screen readers read it on demand, not every tick.
 */
export function Expiry({ at }: { at: string }) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, [at]);
  const e = expiryWords(at, now);
  return (
    <time
      role="timer"
      dateTime={at}
      class={`expiry${e.soon ? ' soon' : ''}`}
      title={`The agent stops waiting at ${new Date(at).toLocaleTimeString()}`}
      data-testid="expiry"
    >
      {e.words}
    </time>
  );
}
