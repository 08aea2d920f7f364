import { useState } from 'preact/hooks';
import { get, post } from './api';
import { hrefOf, useResync } from './app';
import { formatCost, formatCount } from './model';
import { useTaskPushes } from './task-pushes';
import type { CostSummary, Hold, Task, TreePreview } from '@kandev/contracts';
import { ActionButton, Dialog, ErrorNote, Spinner, useLoad } from './ui';

/** Whether a pushed hold concerns this task: it is the hold's root or one of its members. */
const holdCovers = (hold: Hold, taskId: string) => hold.root_task_id === taskId || hold.members.some((m) => m.task_id === taskId);

/**
 * R-4 on the task page: what the tree holds, Pause/Resume, Cancel (confirmed)/Restore, and the Tree
 * cost card. The tree controls and the cost card are for tasks with subtasks; a held task keeps its
 * Resume / Restore. Live: a hold made or released anywhere (the API, an agent, a budget, another
 * operator) and a subtask created under the tree re-read the preview.
 */
export function TreePanel({ task, hasChildren }: { task: Task; hasChildren: boolean }) {
  const resync = useResync();
  const preview = useLoad(() => post<TreePreview>(`/tasks/${task.id}/tree/preview`), [task.id, task.updated_at, resync]);
  const members = new Set((preview.value?.tasks ?? []).map((t) => t.id));
  useTaskPushes(
    (n) =>
      ((n.action === 'tree_hold.created' || n.action === 'tree_hold.released') &&
        (holdCovers(n.payload.hold, task.id) || isMember(members, n.payload.task_id))) ||
      (n.action === 'task.created' && isMember(members, n.payload.task.parent_id)),
    () => preview.reload(),
    [task.id, preview.value],
  );
  const [confirm, setConfirm] = useState<TreePreview | null>(null);
  const [confirmError, setConfirmError] = useState<unknown>(null);
  const act = (what: string) => () => post(`/tasks/${task.id}/tree/${what}`).finally(preview.reload);

  const p = preview.value;
  const hold = p?.active_hold ?? null;
  const ownHold = hold && hold.root_task_id === task.id;
  // A childless task that nothing holds has no tree to control.
  if (!hasChildren && !hold && !(preview.loading && !p)) return null;
  return (
    <>
      <section class="card tree-panel" aria-label="Tree controls">
        <h2>Task tree</h2>
        {p ? (
          <p class="meta" data-testid="tree-preview">
            {formatCount(p.task_count)} task{p.task_count === 1 ? '' : 's'} in this tree · {formatCount(p.active_wakeup_count)} active wakeup
            {p.active_wakeup_count === 1 ? '' : 's'}
            {hold ? (
              <>
                {' '}
                · {hold.mode === 'pause' ? 'paused' : 'cancelled as a tree'} {hold.created_by ? `by ${hold.created_by}` : ''}
              </>
            ) : null}
          </p>
        ) : preview.loading ? (
          <Spinner label="Counting the tree" />
        ) : null}
        <ErrorNote error={preview.error} what="Tree preview" />
        {p ? (
          <div class="controls">
            {hold && !ownHold ? (
              <p class="note">
                This task is held by the tree of <a href={hrefOf(task.workspace_id, hold.root_task_id)}>its ancestor</a>; resume or restore it there.
              </p>
            ) : hold?.mode === 'pause' ? (
              <ActionButton kind="primary" testid="resume-tree" onClick={act('resume')}>
                Resume
              </ActionButton>
            ) : hold?.mode === 'cancel' ? (
              <ActionButton kind="primary" testid="restore-tree" onClick={act('restore')}>
                Restore tree
              </ActionButton>
            ) : (
              <>
                <ActionButton
                  testid="pause-tree"
                  title={`Stop every live session of the ${p.task_count} tasks now and gate their wakeups`}
                  onClick={act('pause')}
                >
                  Pause tree ({formatCount(p.task_count)})
                </ActionButton>
                <ActionButton
                  kind="danger"
                  testid="cancel-tree"
                  onClick={async () => {
                    // Fresh counts for the dialog: the tree may have grown since the panel was read.
                    setConfirmError(null);
                    setConfirm(await post<TreePreview>(`/tasks/${task.id}/tree/preview`));
                  }}
                >
                  Cancel tree…
                </ActionButton>
              </>
            )}
          </div>
        ) : null}
      </section>
      {confirm ? (
        <Dialog title="Cancel this task tree?" onClose={() => setConfirm(null)}>
          <p data-testid="cancel-dialog-counts">
            This cancels <strong>{formatCount(confirm.task_count)}</strong> task{confirm.task_count === 1 ? '' : 's'} (this one and every subtask), stops their
            running sessions now, and cancels <strong>{formatCount(confirm.active_wakeup_count)}</strong> active wakeup
            {confirm.active_wakeup_count === 1 ? '' : 's'}.
          </p>
          <p class="meta">Each task's status is kept, so Restore tree can put them back.</p>
          <ErrorNote error={confirmError} />
          <div class="controls">
            <button type="button" class="btn plain" data-autofocus onClick={() => setConfirm(null)}>
              Keep working
            </button>
            <ActionButton
              kind="danger"
              testid="confirm-cancel-tree"
              onClick={async () => {
                try {
                  await post(`/tasks/${task.id}/tree/cancel`);
                  setConfirm(null);
                } catch (e) {
                  setConfirmError(e);
                } finally {
                  preview.reload();
                }
              }}
            >
              Cancel {formatCount(confirm.task_count)} tasks
            </ActionButton>
          </div>
        </Dialog>
      ) : null}
      {hasChildren ? <CostCard taskId={task.id} members={members} /> : null}
    </>
  );
}

/** The tree's spend (R-4.7). Live: re-read when a member's session changes state (a turn's usage is recorded by its end) or the budget warns. */
function CostCard({ taskId, members }: { taskId: string; members: Set<string> }) {
  const resync = useResync();
  const cost = useLoad(() => get<CostSummary>(`/tasks/${taskId}/tree/cost-summary`), [taskId, resync]);
  useTaskPushes(
    (n) =>
      (n.action === 'session.state_changed' || n.action.startsWith('tree_budget.')) && (n.payload.task_id === taskId || isMember(members, n.payload.task_id)),
    () => cost.reload(),
    [taskId, members.size],
  );
  const c = cost.value;
  return (
    <section class="card cost" aria-label="Tree cost" data-testid="cost-card">
      <div class="head-row">
        <h2>Tree cost</h2>
        <button type="button" class="btn plain small" onClick={cost.reload} disabled={cost.loading}>
          Refresh
        </button>
      </div>
      <ErrorNote error={cost.error} what="Tree cost" />
      {c ? (
        <>
          <p class="total" data-testid="cost-total">
            {formatCost(c.cost_cents)}
          </p>
          <p class="meta">
            US dollars, from {formatCount(c.task_count)} task{c.task_count === 1 ? '' : 's'} with usage in this tree
          </p>
          <dl class="tokens">
            <dt>Input tokens</dt>
            <dd data-testid="tokens-in">{formatCount(c.tokens_in)}</dd>
            <dt>of which cached</dt>
            <dd data-testid="tokens-cached">{formatCount(c.tokens_cached_in)}</dd>
            <dt>Output tokens</dt>
            <dd data-testid="tokens-out">{formatCount(c.tokens_out)}</dd>
          </dl>
          {c.unpriced_events ? (
            <p class="note" data-testid="unpriced">
              {formatCount(c.unpriced_events)} usage report{c.unpriced_events === 1 ? '' : 's'} came from a model without a price: their tokens are counted
              above, their cost is not.
            </p>
          ) : null}
        </>
      ) : cost.loading ? (
        <Spinner label="Loading cost" />
      ) : null}
    </section>
  );
}

const isMember = (members: Set<string>, id: string | null) => id !== null && members.has(id);
