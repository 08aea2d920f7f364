import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, get, qs } from './api';
import { useLive, useResync } from './app';
import { applyPush, hasGap, kindWords, mergeMessages } from './model';
import { useTaskPushes } from './task-pushes';
import type { MessagePage, TranscriptItem } from '@kandev/contracts';
import { ErrorNote, Spinner } from './ui';

/** The transcript: read in pages (oldest first), then extended by `session.message` pushes as the agent talks. */
export function Transcript({ sessionId }: { sessionId: string }) {
  const live = useLive();
  const resync = useResync();
  const [items, setItems] = useState<TranscriptItem[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const itemsRef = useRef<TranscriptItem[]>([]);
  const box = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  const paging = useRef(false);
  /** A catch-up asked for while one was paging: run once more when it ends, from just before the newest item. */
  const again = useRef(false);

  const set = (next: TranscriptItem[]) => {
    itemsRef.current = next;
    setItems(next);
  };
  // Page from the last seq held until the server says there is no more. A pushed chunk for an item
  // not held yet makes `from` the seq before it.
  const catchUp = async (from?: number): Promise<void> => {
    if (paging.current) {
      // The page in flight may have been read before what this push announced: read again after it.
      again.current = true;
      return;
    }
    paging.current = true;
    again.current = false;
    try {
      for (let i = 0; i < 50; i++) {
        const last = itemsRef.current.length ? itemsRef.current[itemsRef.current.length - 1]!.seq : undefined;
        const after = i === 0 && from !== undefined ? from : last;
        const page = await get<MessagePage>(`/sessions/${sessionId}/messages${qs({ after_seq: after, limit: 500 })}`);
        set(mergeMessages(itemsRef.current, page.items));
        if (!page.next_cursor || page.items.length === 0) break;
      }
      setError(null);
    } catch (e) {
      setError(e);
    } finally {
      paging.current = false;
      setLoading(false);
    }
    if (again.current) {
      const last = itemsRef.current[itemsRef.current.length - 1];
      await catchUp(last ? Math.max(0, last.seq - 1) : undefined);
    }
  };
  useEffect(() => void catchUp(), [sessionId, resync]);
  // When the session's turn or state moves, re-read the newest item whole: a streamed chunk pushed
  // while its item's page was in flight is then not lost.
  useTaskPushes(
    (n) => n.payload.session_id === sessionId && n.action !== 'session.message',
    () => {
      const last = itemsRef.current[itemsRef.current.length - 1];
      void catchUp(last ? Math.max(0, last.seq - 1) : undefined);
    },
    [sessionId],
  );
  useEffect(
    () =>
      live.onNotification((n) => {
        if (n.action !== 'session.message' || n.payload.session_id !== sessionId) return;
        const raw = n.payload;
        const next = applyPush(itemsRef.current, raw);
        if (next === null) {
          // A chunk of an item not held, or after a chunk missed: read the item whole (from just before it).
          void catchUp(raw.seq - 1);
          return;
        }
        if (hasGap(itemsRef.current, raw)) void catchUp();
        // A page in flight may have been read before this push and would put the older text back: read again after it.
        else if (paging.current) again.current = true;
        set(next);
      }),
    [sessionId],
  );
  // Follow the newest line unless the operator scrolled up to read.
  useEffect(() => {
    const el = box.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [items]);
  const routeMissing = error instanceof ApiError && error.routeMissing;
  return (
    <div class="transcript-wrap">
      <h3>Transcript</h3>
      {routeMissing ? <p class="note">{(error as ApiError).message}</p> : <ErrorNote error={error} what="Transcript" />}
      <div
        class="transcript"
        ref={box}
        data-testid="transcript"
        tabIndex={0}
        aria-label="Session transcript"
        aria-live="polite"
        onScroll={(e) => {
          const el = e.target as HTMLDivElement;
          stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
        }}
      >
        {loading && items.length === 0 ? <Spinner label="Loading transcript" /> : null}
        {!loading && items.length === 0 && !error ? <p class="empty">Nothing said yet.</p> : null}
        {items.map((m) => (
          <div class={`msg msg-${m.role} kind-${m.kind}`} data-seq={m.seq} key={m.seq}>
            <span class="who">{kindWords(m.role, m.kind)}</span>
            <span class="text">{m.text}</span>
          </div>
        ))}
      </div>
    </div>
  );
}
