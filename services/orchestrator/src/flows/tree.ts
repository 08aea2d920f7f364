import { randomUUID } from 'node:crypto';
import {
  actorLabel,
  conflict,
  Holds,
  MAX_HOLD_MEMBERS,
  notFound,
  type Actor,
  type Hold,
  type HoldMember,
  type Execution,
  type HoldMode,
  type TreePreview,
} from '@kandev/contracts';
import { metrics, product, request, type Logger, type StopSource } from '@kandev/runtime';
import { assertCanAccess } from '../domain/access.js';
import { StopReasons, planTreeStop } from '../domain/stop.js';
import { holdMembersOf, releaseConflict } from '../domain/tree.js';
import { recordAudits, type AuditRecord } from '../store/audit.js';
import {
  activeHoldOfTasks,
  bumpFences,
  cancelTasks,
  getHold,
  insertHold,
  lockActiveHoldRootedAt,
  lockSubtree,
  lockTasks,
  releaseHold,
  restoreTasks,
  subtree,
  tasksWithoutActiveSession,
} from '../store/holds.js';
import { lockActiveSessionsOfTasks } from '../store/sessions.js';
import { getTask } from '../store/tasks.js';
import { toTask, type TaskRow } from '../store/rows.js';
import type { Tx } from '@kandev/runtime';
import { transact, type CallContext, type Emit, type OrchRuntime } from './context.js';
import { acceptStops, failedDecision } from './stop-decision.js';
import { dispatchTeardowns } from './teardown-dispatch.js';
import { refuseResumeOverBudget } from './budget.js';

/** how long a pause or cancel waits for its session stops to reach their owners before replying. */
export const PROPAGATION_WAIT_MS = 1_000;

const UNIQUE_VIOLATION = '23505';

/**
 * Hold changes of one workspace run one at a time: they lock many task rows at once, two of them
 * interleaving on overlapping trees would wait on each other's rows in opposite orders, and they are
 * rare operator actions, so a transaction-scoped advisory lock per workspace costs nothing that matters.
 */
async function serialiseHoldsOf(tx: Tx, workspaceId: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtext(${'kandev-tree-holds:' + workspaceId}))`;
}

async function accessibleRoot(rt: OrchRuntime, actor: Actor, taskId: string): Promise<TaskRow> {
  return assertCanAccess(actor, await getTask(rt.sql, taskId));
}

/** Queued and claimed wakeups of these tasks, asked of the holds service in bounded chunks. */
async function activeWakeupCount(rt: OrchRuntime, call: CallContext, taskIds: readonly string[]): Promise<number> {
  let count = 0;
  for (let i = 0; i < taskIds.length; i += MAX_HOLD_MEMBERS) {
    const res = await request(rt.nc, Holds.wakeupCount, { task_ids: taskIds.slice(i, i + MAX_HOLD_MEMBERS) }, { requestId: call.requestId });
    count += res.count;
  }
  return count;
}

/** what a pause or cancel would touch. A dry run: reads only. */
export async function previewTree(rt: OrchRuntime, call: CallContext, actor: Actor, taskId: string): Promise<TreePreview> {
  const root = await accessibleRoot(rt, actor, taskId);
  const tasks = await subtree(rt.sql, root.id);
  // a hold on any member (a child's subtree paused) makes a pause or cancel of this tree
  // refused, so preview shows it; a task is in at most one active hold, the root's covers them all.
  const held = await activeHoldOfTasks(
    rt.sql,
    tasks.map((t) => t.id),
  );
  const [active_wakeup_count, active_hold] = await Promise.all([
    activeWakeupCount(
      rt,
      call,
      tasks.map((t) => t.id),
    ),
    held ? getHold(rt.sql, held.hold_id) : Promise.resolve(null),
  ]);
  return {
    task_count: tasks.length,
    tasks: tasks.map((t) => ({ id: t.id, title: t.title, status: t.status, depth: t.depth })),
    active_wakeup_count,
    active_hold,
  };
}

async function auditMembers(tx: Tx, hold: Hold, action: string, actor: Actor, reason: string | null, requestId: string, outcome: string) {
  await recordAudits(
    tx,
    hold.members.map((m) => ({
      task_id: m.task_id,
      workspace_id: hold.workspace_id,
      action,
      actor: actorLabel(actor),
      reason,
      request_id: requestId,
      outcome,
      details: { hold_id: hold.id, root_task_id: hold.root_task_id, mode: hold.mode, depth: m.depth, task_status: m.task_status, skip_reason: m.skip_reason },
    })),
  );
}

/** The audit row of a tree action on its root (B-3): what `auditMembers` writes when it commits, and its failures otherwise. */
const rootAudit =
  (root: TaskRow, action: string, actor: Actor, reason: string | null, requestId: string) =>
  (outcome: string, details: Record<string, unknown>): AuditRecord => ({
    task_id: root.id,
    workspace_id: root.workspace_id,
    action,
    actor: actorLabel(actor),
    reason,
    request_id: requestId,
    outcome,
    details,
  });

/** A tree action's transaction, failing as a stop's does: its failure audited on the root (B-3). */
async function auditedFailure<T>(rt: OrchRuntime, log: Logger, audit: ReturnType<typeof rootAudit>, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (e) {
    throw await failedDecision(rt, log, e, audit('error:INTERNAL_ERROR', { stage: 'accept' }), 'the tree action failed');
  }
}

/**
 * pause and cancel, as one transaction: lock the subtree (so membership is exact at
 * that instant), record the hold and every member's status snapshot, fence every member's
 * launches (B-1), for a cancel move members to CANCELLED, and accept the stop of every active
 * session in the subtree (no REVIEW transition). Then, after commit, the teardowns go to their
 * owners and the holds service gates the members and cancels their wakeups; the reply waits for
 * those up to PROPAGATION_WAIT_MS. Anything still in flight then is finished by the reconciler
 * (teardowns) or by the holds service's event consumer (wakeups): a crash after the commit loses nothing.
 */
export async function holdTree(
  rt: OrchRuntime,
  call: CallContext,
  actor: Actor,
  taskId: string,
  mode: HoldMode,
  reason: string | null,
  opts: { createdBy?: string; source?: StopSource } = {},
): Promise<{ hold: Hold }> {
  const root = await accessibleRoot(rt, actor, taskId);
  const stopReason = mode === 'pause' ? StopReasons.treePause : StopReasons.treeCancel;
  const log = rt.log.child({ task_id: root.id, request_id: call.requestId, mode });
  const audit = rootAudit(root, `tree.${mode}`, actor, reason, call.requestId);
  // The members' registry entries (orphans included), listed from the bucket alongside the
  // transaction's first statements, as a task stop lists its task's (ADR 0011).
  const registry = new MembersRegistryView(
    rt,
    (await subtree(rt.sql, root.id)).map((t) => t.id),
    log,
  );
  // A stop decision in flight while it runs: answer-at-commit teardowns yield to it (ADR 0012).
  const { hold, teardowns, stopped, members } = await auditedFailure(rt, log, audit, () =>
    rt.teardownYield.decision(() =>
      transact(rt, async (tx, emit) => {
        await serialiseHoldsOf(tx, root.workspace_id);
        const tasks = await lockSubtree(tx, root.id);
        if (!tasks.length) throw notFound('task not found');
        if (tasks.length > MAX_HOLD_MEMBERS) throw conflict('tree is too large for one hold', { task_count: tasks.length, limit: MAX_HOLD_MEMBERS });
        const ids = tasks.map((t) => t.id);
        const existing = await activeHoldOfTasks(tx, ids);
        if (existing) throw conflict('a task of this tree is already a member of an active hold', { ...existing });
        const members: HoldMember[] = holdMembersOf(tasks, mode);
        await bumpFences(tx, ids);
        if (mode === 'cancel') await cancelMembers(tx, emit, tasks, actor);
        let hold: Hold;
        try {
          hold = await tx.savepoint((sp) =>
            insertHold(
              sp,
              {
                id: randomUUID(),
                workspace_id: root.workspace_id,
                root_task_id: root.id,
                mode,
                created_by: opts.createdBy ?? actorLabel(actor),
                reason,
                request_id: call.requestId,
              },
              members,
            ),
          );
        } catch (e) {
          if ((e as { code?: string }).code === UNIQUE_VIOLATION) throw conflict('a task of this tree is already a member of an active hold');
          throw e;
        }
        const sessions = await lockActiveSessionsOfTasks(tx, ids);
        const accepted = await acceptStops(tx, emit, planTreeStop(sessions, stopReason, await registry.of(ids)), sessions, root.workspace_id, actor);
        await auditMembers(tx, hold, `tree.${mode}`, actor, reason, call.requestId, 'held');
        await emit('tree_hold.created', { workspace_id: root.workspace_id, task_id: root.id, actor }, { hold });
        log.info({ hold_id: hold.id, members: members.length, sessions: accepted.cancelled.length }, 'tree hold created');
        return { hold, teardowns: accepted.teardowns, stopped: accepted.cancelled.length, members: members.length };
      }),
    ),
  );
  // Committed (a retried transaction is counted once): a budget's pause is this same hold, told apart by its caller.
  metrics.holdMembers.observe({ mode }, members);
  product.sessionsStopped(opts.source ?? 'tree_hold', stopped);
  const propagation = Promise.all([
    dispatchTeardowns(rt, call, teardowns, stopReason, log, (details) => audit('error:INTERNAL_ERROR', { ...details, hold_id: hold.id })),
    request(rt.nc, Holds.holdApplied, { hold }, { requestId: call.requestId }).catch((e) =>
      log.warn({ err: e, hold_id: hold.id }, 'gating wakeups failed; the holds service catches up from the event'),
    ),
  ]);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([propagation, new Promise<void>((r) => (timer = setTimeout(r, PROPAGATION_WAIT_MS)))]);
  clearTimeout(timer);
  return { hold };
}

/**
 * The registry entries of a hold's members, for its stop to halt orphans (R-2.1 for a tree). Listed
 * for every member at once (`listForTasks`: one listing of the bucket for a large tree) before the
 * members are locked; members the locked subtree has that the listing did not (children created in
 * between) are listed then. A listing that fails does not fail the hold: its sessions are still
 * cancelled and fenced, and the reconciler stops what the registry shows live for a held member on
 * its next pass (reconcile.ts). The failure is logged.
 */
class MembersRegistryView {
  private readonly listed: Promise<Execution[]>;
  private readonly listedIds: ReadonlySet<string>;
  constructor(
    private readonly rt: OrchRuntime,
    taskIds: readonly string[],
    private readonly log: Logger,
  ) {
    this.listedIds = new Set(taskIds);
    this.listed = rt.registry.listForTasks(taskIds);
    this.listed.catch(() => undefined); // awaited in `of`, or never (a refused hold)
  }

  async of(taskIds: readonly string[]): Promise<Execution[]> {
    const wanted = new Set(taskIds);
    const unlisted = taskIds.filter((id) => !this.listedIds.has(id));
    try {
      const [listed, late] = await Promise.all([this.listed, this.rt.registry.listForTasks(unlisted)]);
      return [...listed.filter((e) => wanted.has(e.task_id)), ...late];
    } catch (e) {
      this.log.warn({ err: e }, 'registry listing of the members failed; orphans are left to the reconciler');
      return [];
    }
  }
}

/** Snapshot already taken under the row locks; every status change publishes its task event. */
async function cancelMembers(tx: Tx, emit: Emit, tasks: readonly TaskRow[], actor: Actor) {
  const before = new Map(tasks.map((t) => [t.id, t.status]));
  for (const t of await cancelTasks(
    tx,
    tasks.map((x) => x.id),
  )) {
    await emit(
      'task.state_changed',
      { workspace_id: t.workspace_id, task_id: t.id, actor },
      { task: toTask(t), from: before.get(t.id)!, to: 'CANCELLED', reason: StopReasons.treeCancel },
    );
  }
}

/** ADR 0025: the audit row and the `task.attention` event of a task a resume or restore left IN_PROGRESS with no session. */
async function flagReleasedWithoutSession(tx: Tx, emit: Emit, t: TaskRow, holdId: string, mode: HoldMode, actor: Actor, requestId: string) {
  const reason = mode === 'pause' ? 'resumed_without_session' : 'restored_without_session';
  await recordAudits(tx, [
    {
      task_id: t.id,
      workspace_id: t.workspace_id,
      action: 'task.needs_attention',
      actor: actorLabel(actor),
      reason,
      request_id: requestId,
      outcome: 'flagged',
      details: { hold_id: holdId, status: t.status },
    },
  ]);
  await emit('task.attention', { workspace_id: t.workspace_id, task_id: t.id, actor }, { task: toTask(t), reason });
}

/**
 * resume (pause holds) and restore (cancel holds): release the active hold of that
 * mode rooted at this task; a restore also returns every member not skipped to its snapshot, all
 * in one transaction. Member tasks are locked first, in the order a new hold locks them, so a
 * release and a new hold over the same tree cannot deadlock.
 */
export async function releaseTree(
  rt: OrchRuntime,
  call: CallContext,
  actor: Actor,
  taskId: string,
  mode: HoldMode,
  reason: string | null,
): Promise<{ hold: Hold }> {
  const root = await accessibleRoot(rt, actor, taskId);
  const log = rt.log.child({ task_id: root.id, request_id: call.requestId, mode });
  const audit = rootAudit(root, mode === 'pause' ? 'tree.resume' : 'tree.restore', actor, reason, call.requestId);
  const hold = await auditedFailure(rt, log, audit, () =>
    transact(rt, async (tx, emit) => {
      await serialiseHoldsOf(tx, root.workspace_id);
      const candidate = await activeHoldOfTasks(tx, [root.id]);
      if (!candidate || candidate.root_task_id !== root.id || candidate.mode !== mode) throw releaseConflict(mode, candidate);
      if (mode === 'pause') await refuseResumeOverBudget(rt, call, tx, root.id); // B-8
      const current = (await getHold(tx, candidate.hold_id))!;
      const locked = await lockTasks(
        tx,
        current.members.map((m) => m.task_id),
      );
      const held = await lockActiveHoldRootedAt(tx, root.id, mode);
      if (!held || held.id !== current.id) throw releaseConflict(mode, null);
      if (mode === 'cancel') {
        const before = new Map(locked.map((t) => [t.id, t.status]));
        const restorable = held.members.filter((m) => m.skip_reason === null).map((m) => ({ task_id: m.task_id, task_status: m.task_status }));
        for (const t of await restoreTasks(tx, restorable)) {
          await emit(
            'task.state_changed',
            { workspace_id: t.workspace_id, task_id: t.id, actor },
            { task: toTask(t), from: before.get(t.id)!, to: t.status, reason: 'tree_restored' },
          );
        }
      }
      // ADR 0025: a member the release leaves IN_PROGRESS has nothing running (the hold stopped its
      // sessions and fenced its launches). It keeps that status and the reconciler
      // leaves it be until a session of it moves; the operator is told, not left to guess.
      const after = await tasksWithoutActiveSession(
        tx,
        held.members.filter((m) => m.skip_reason === null).map((m) => m.task_id),
      );
      for (const t of after) if (t.status === 'IN_PROGRESS') await flagReleasedWithoutSession(tx, emit, t, held.id, mode, actor, call.requestId);
      const released = await releaseHold(tx, held.id, actorLabel(actor), reason);
      await auditMembers(tx, released, mode === 'pause' ? 'tree.resume' : 'tree.restore', actor, reason, call.requestId, 'released');
      await emit('tree_hold.released', { workspace_id: root.workspace_id, task_id: root.id, actor }, { hold: released });
      log.info({ hold_id: released.id }, 'tree hold released');
      return released;
    }),
  );
  await request(rt.nc, Holds.holdReleased, { hold }, { requestId: call.requestId }).catch((e) =>
    log.warn({ err: e, hold_id: hold.id }, 'ungating wakeups failed; the holds service catches up from the event'),
  );
  return { hold };
}
