import { createContext, type ComponentChildren } from 'preact';
import { useContext, useMemo } from 'preact/hooks';
import { ApiError, get } from './api';
import { hrefOf, useResync } from './app';
import { useWorkspaceLive } from './board';
import { BundleView } from './clarifications';
import { ago, pendingBySubtree } from './model';
import { PendingPermission } from './permissions';
import { useTaskPushes } from './task-pushes';
import type { ClarificationBundleView, Inbox, InboxItem, PermissionRequest } from '@kandev/contracts';
import { ErrorNote, Expiry, Spinner, useLoad } from './ui';

export const inboxHref = (workspace: string) => `#/w/${encodeURIComponent(workspace)}/inbox`;

/** GET /inbox for the workspace, re-read on `inbox.changed` and on any question or permission push. */
function useLiveInbox(workspace: string) {
  const resync = useResync();
  const inbox = useLoad(() => get<Inbox>(`/inbox?workspace_id=${encodeURIComponent(workspace)}`), [workspace, resync]);
  useTaskPushes(
    (n) => n.action === 'inbox.changed' || n.action.startsWith('clarification.') || n.action.startsWith('permission.'),
    () => inbox.reload(),
    [workspace],
  );
  return inbox;
}

type LiveInbox = ReturnType<typeof useLiveInbox>;
const InboxContext = createContext<LiveInbox | null>(null);

/** One live inbox load per workspace, shared by the header's count, the board's badges and the Inbox page. */
export function InboxProvider({ workspace, children }: { workspace: string; children: ComponentChildren }) {
  return <InboxContext.Provider value={useLiveInbox(workspace)}>{children}</InboxContext.Provider>;
}
export const useInbox = (): LiveInbox => useContext(InboxContext)!;

/** How many inbox items wait in each task's subtree (the board's and the tree's badges). */
export function useWaitingBySubtree(): Map<string, number> {
  const inbox = useInbox();
  return useMemo(() => pendingBySubtree(inbox.value?.items ?? []), [inbox.value]);
}

/** The header's way to the Inbox, with how many items wait. */
export function InboxLink({ workspace }: { workspace: string }) {
  const inbox = useInbox();
  const n = inbox.value?.items.length ?? 0;
  return (
    <a class="inbox-link" href={inboxHref(workspace)} data-testid="inbox-link">
      Inbox{n ? <span class="inbox-count"> ({n})</span> : null}
    </a>
  );
}

/**
 * Everything in the workspace waiting on a person (R-12.2, GET /inbox): question bundles and
 * permission requests of any task, a child's too, oldest first, each answered in place. Live: re-read
 * on `inbox.changed` and on any question or permission push of the workspace.
 */
export function InboxPage({ workspace }: { workspace: string }) {
  useWorkspaceLive(workspace);
  const inbox = useInbox();
  const items = inbox.value?.items ?? [];
  return (
    <main class="page inbox-page">
      <nav class="crumbs">
        <a href={hrefOf(workspace)}>← Board</a>
      </nav>
      <div class="toolbar">
        <h1>
          Inbox{' '}
          <span class="count" data-testid="inbox-count">
            {inbox.value ? `${items.length} waiting` : ''}
          </span>
        </h1>
        {inbox.loading ? <Spinner label="Loading the inbox" /> : null}
      </div>
      {inbox.error instanceof ApiError && inbox.error.routeMissing ? (
        <p class="note card">{inbox.error.message}</p>
      ) : (
        <ErrorNote error={inbox.error} what="Inbox" />
      )}
      {inbox.value && items.length === 0 ? <p class="empty">Nothing waits on you in this workspace.</p> : null}
      <ol class="inbox-items">
        {items.map((i) => (
          <li key={`${i.kind}-${i.id}`} class="card attention" data-testid="inbox-item" data-kind={i.kind}>
            <p class="meta">
              {i.kind === 'clarification' ? 'Questions' : 'Permission request'} from <a href={hrefOf(workspace, i.task_id)}>{i.task_title}</a> ·{' '}
              {ago(i.created_at)}
              {i.expires_at ? (
                <>
                  {' '}
                  · <Expiry at={i.expires_at} />
                </>
              ) : null}
            </p>
            <InboxAnswer item={i} done={inbox.reload} />
          </li>
        ))}
      </ol>
    </main>
  );
}

/** The item's own answer controls: the question bundle, or the permission request with its options. */
function InboxAnswer({ item, done }: { item: InboxItem; done: () => void }) {
  const detail = useLoad<ClarificationBundleView | PermissionRequest | null>(
    async () =>
      item.kind === 'clarification'
        ? get<ClarificationBundleView>(`/clarification/${item.id}`)
        : ((await get<PermissionRequest[]>(`/tasks/${item.task_id}/permissions`)).find((p) => p.id === item.id) ?? null),
    [item.kind, item.id],
  );
  if (detail.error) return <ErrorNote error={detail.error} what={item.text} />;
  if (!detail.value) return detail.loading ? <Spinner label="Loading" /> : <p class="note">{item.text} (already answered)</p>;
  return item.kind === 'clarification' ? (
    <BundleView bundle={detail.value as ClarificationBundleView} done={done} expiry={false} />
  ) : (
    <PendingPermission p={detail.value as PermissionRequest} done={done} />
  );
}
