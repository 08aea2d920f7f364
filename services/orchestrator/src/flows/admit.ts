import { isActiveSession, type RequestOf, type Orch } from '@kandev/contracts';
import { recordAudit } from '../store/audit.js';
import { attachExecution, lockSession } from '../store/sessions.js';
import { lockTask } from '../store/tasks.js';
import { transact, type OrchRuntime } from './context.js';

/**
 * B-1 launch fence. Called by the lifecycle service once an execution has registered. Under
 * the task's row lock — the same lock every stop takes to bump the epoch — the launch lives only
 * if no stop was accepted since it began and its session is still active. Registration happens
 * before admission, so a stop that bumped first refuses it here, and a stop that bumps later
 * finds it in the registry.
 */
export async function admitExecution(rt: OrchRuntime, req: RequestOf<typeof Orch.executionAdmit>) {
  const verdict = await transact(rt, async (tx) => {
    const task = await lockTask(tx, req.task_id);
    if (!task) return { admitted: false, reason: 'task not found' };
    if (task.fence_epoch !== req.fence_epoch) {
      const reason = 'a stop was accepted for this task after the launch began';
      // B-3: a launch the fence refused is a control outcome worth finding later (B-1).
      await recordAudit(tx, {
        task_id: task.id,
        workspace_id: task.workspace_id,
        action: 'execution.admit',
        actor: `system:lifecycle:${req.instance_id ?? 'unknown'}`,
        reason,
        request_id: null,
        outcome: 'refused',
        details: { session_id: req.session_id, execution_id: req.execution_id, fence_epoch: req.fence_epoch, current_epoch: task.fence_epoch },
      });
      return { admitted: false, reason };
    }
    const s = await lockSession(tx, req.session_id);
    if (!s || s.task_id !== task.id) return { admitted: false, reason: 'session not found' };
    if (!isActiveSession(s.state)) return { admitted: false, reason: `session is ${s.state}` };
    if (s.execution_id && s.execution_id !== req.execution_id) return { admitted: false, reason: 'session already has another execution' };
    await attachExecution(tx, s.id, req.execution_id, req.instance_id ?? null);
    return { admitted: true, reason: null };
  });
  rt.log.info(
    { task_id: req.task_id, session_id: req.session_id, execution_id: req.execution_id, ...verdict },
    verdict.admitted ? 'execution admitted' : 'execution refused by launch fence',
  );
  return verdict;
}
