import {
  actorLabel,
  canAccessWorkspace,
  forbidden,
  notFound,
  validationError,
  type Actor,
  type OperatorActor,
  type Orch,
  type RequestOf,
  type Task,
  type TaskWithSessions,
} from '@kandev/contracts';
import { assertCanAccess } from '../domain/access.js';
import { auditOfTask, recordAudit } from '../store/audit.js';
import { activeHoldOfTask } from '../store/holds.js';
import { queueOfTask } from '../store/queue.js';
import { getTask, insertTask, insertWorkspace, lockParentForChild, lockTask, taskWithSessions, updateTaskFields, workspaceExists } from '../store/tasks.js';
import { toSession, toTask } from '../store/rows.js';
import { changeTaskStatus } from './changes.js';
import { assertKnownAgent } from './agents.js';
import { transact, type CallContext, type OrchRuntime } from './context.js';
import { once } from './idempotency.js';
import { assertChildRoom } from './limits.js';
import { checkWorkingDir, workDirRoot } from '@kandev/runtime';

type Req<K extends keyof typeof Orch> = RequestOf<(typeof Orch)[K]>;

/**
 * Only an operator whose token covers every workspace (`["*"]`) creates workspaces
 * (docs/security.md): a scoped token could not even see the workspace it made, and widening
 * one's own scope is not the scoped operator's call.
 */
export async function createWorkspace(rt: OrchRuntime, actor: OperatorActor, name: string) {
  if (!actor.workspaces.includes('*')) throw forbidden('only an operator token for all workspaces may create workspaces');
  const ws = await insertWorkspace(rt.sql, name);
  rt.log.info({ workspace_id: ws.id, actor: actor.id }, 'workspace created');
  return ws;
}

/** POST /tasks: the agent, when named, must be launchable; with an `idempotency_key`, the same key from the same operator answers with the first task. */
export async function createTask(rt: OrchRuntime, call: CallContext, req: Req<'taskCreate'>): Promise<Task> {
  if (!canAccessWorkspace(req.actor, req.workspace_id)) throw forbidden('no access to this workspace');
  // a working_dir is under KANDEV_WORK_DIR or refused before anything is written.
  if (req.working_dir) {
    const check = checkWorkingDir(workDirRoot(rt.env), req.working_dir, req.workspace_id);
    if (!check.ok) throw validationError(check.reason, { field: 'working_dir' });
  }
  // A task naming an agent nobody can launch would only fail later, at its first start.
  if (req.agent) await assertKnownAgent(rt, call, req.agent);
  return once<Task>(rt, { scope: actorLabel(req.actor), operation: 'orch.task.create', key: req.idempotency_key }, req, () => insertNewTask(rt, req));
}

/** Insert a task (no idempotency); the child-task flow calls this under its own key. */
export async function insertNewTask(rt: OrchRuntime, req: Req<'taskCreate'>): Promise<Task> {
  const { actor } = req;
  if (!canAccessWorkspace(actor, req.workspace_id)) throw forbidden('no access to this workspace');
  return transact(rt, async (tx, emit) => {
    if (!(await workspaceExists(tx, req.workspace_id))) throw notFound('workspace not found');
    if (req.parent_id) {
      const parent = await lockParentForChild(tx, req.parent_id);
      // A parent in another workspace is answered exactly like a missing one: the caller learns nothing about ids outside its scope.
      if (!parent || parent.workspace_id !== req.workspace_id) throw notFound('parent task not found');
      // an agent's children and depth are bounded (an operator's are not).
      if (actor.type === 'agent') await assertChildRoom(rt, tx, parent.id);
    }
    const row = await insertTask(tx, {
      workspace_id: req.workspace_id,
      parent_id: req.parent_id ?? null,
      title: req.title,
      description: req.description ?? null,
      office: req.office ?? false,
      agent: req.agent ?? null,
      working_dir: req.working_dir ?? null,
    });
    await emit('task.created', { workspace_id: row.workspace_id, task_id: row.id, actor }, { task: toTask(row) });
    return toTask(row);
  });
}

export async function getTaskWithSessions(rt: OrchRuntime, actor: Actor, taskId: string): Promise<TaskWithSessions> {
  const found = await taskWithSessions(rt.sql, taskId);
  const task = assertCanAccess(actor, found?.task ?? null);
  // The hold, as GET /tasks lists it: a page opened by link or reload badges a held root too.
  const held = await activeHoldOfTask(rt.sql, task.id);
  return { ...toTask(task), sessions: (found?.sessions ?? []).map(toSession), hold: held ? { id: held.hold_id, mode: held.mode } : null };
}

export async function updateTask(rt: OrchRuntime, call: CallContext, req: Req<'taskUpdate'>) {
  assertCanAccess(req.actor, await getTask(rt.sql, req.task_id));
  return transact(rt, async (tx, emit) => {
    const before = (await lockTask(tx, req.task_id))!;
    let task = before;
    if (req.title !== undefined || req.archived !== undefined) {
      task = await updateTaskFields(tx, task.id, {
        ...(req.title !== undefined ? { title: req.title } : {}),
        ...(req.archived !== undefined ? { archived: req.archived } : {}),
      });
    }
    if (req.status) task = await changeTaskStatus(tx, emit, task, req.status, { actor: req.actor, reason: 'operator_update' });
    // B-3: an operator moving a card or archiving it is a control action, audited with the change.
    if (req.status !== undefined || req.archived !== undefined) {
      await recordAudit(tx, {
        task_id: task.id,
        workspace_id: task.workspace_id,
        action: 'task.update',
        actor: actorLabel(req.actor),
        reason: null,
        request_id: call.requestId,
        outcome: 'updated',
        details: { from: before.status, to: task.status, ...(req.archived !== undefined ? { archived: req.archived } : {}) },
      });
    }
    return toTask(task);
  });
}

export async function taskQueue(rt: OrchRuntime, actor: Actor, taskId: string) {
  assertCanAccess(actor, await getTask(rt.sql, taskId));
  return queueOfTask(rt.sql, taskId);
}

export async function taskAudit(rt: OrchRuntime, actor: Actor, taskId: string) {
  assertCanAccess(actor, await getTask(rt.sql, taskId));
  return auditOfTask(rt.sql, taskId);
}
