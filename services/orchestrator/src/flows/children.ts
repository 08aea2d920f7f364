import { actorLabel, notFound, type OrchMcp, type RequestOf, type Task } from '@kandev/contracts';
import { assertKnownAgent } from './agents.js';
import { once } from './idempotency.js';
import { getTask } from '../store/tasks.js';
import type { CallContext, OrchRuntime } from './context.js';
import { startSession } from './start-session.js';
import { insertNewTask } from './tasks.js';

type ChildTask = Task & { session_id: string | null };

/**
 * create_task_kandev: a child of the caller in the caller's workspace, optionally started.
 * Everything checkable (caller, agent) is checked before the child is written, so a refused call
 * leaves nothing behind and its retry cannot duplicate. With an `idempotency_key` the same key from
 * the same task answers with the first child; once the child exists that answer is recorded, so a
 * retry after a failed start gets the child (session_id null) rather than a second one.
 */
export async function createChildTask(rt: OrchRuntime, call: CallContext, req: RequestOf<typeof OrchMcp.createTask>): Promise<ChildTask> {
  const caller = await getTask(rt.sql, req.caller_task_id);
  if (!caller) throw notFound('calling task not found');
  const actor = { type: 'agent' as const, task_id: caller.id };
  const agent = req.agent ?? caller.agent ?? null;
  if (req.prompt || req.agent) await assertKnownAgent(rt, call, agent ?? rt.env.DEFAULT_AGENT);
  return once<ChildTask>(rt, { scope: actorLabel(actor), operation: 'orch.mcp.create_task', key: req.idempotency_key }, req, async (idem) => {
    const task = await insertNewTask(rt, {
      actor,
      workspace_id: caller.workspace_id,
      parent_id: caller.id,
      title: req.title,
      description: req.description ?? null,
      agent,
    });
    if (!req.prompt) return { ...task, session_id: null };
    await idem.checkpoint({ ...task, session_id: null });
    const started = await startSession(rt, call, { actor, task_id: task.id, prompt: req.prompt, sender_task_id: caller.id });
    const fresh = (await getTask(rt.sql, task.id))!;
    return { ...task, status: fresh.status, updated_at: fresh.updated_at, session_id: started.session.id };
  });
}

export async function whoami(rt: OrchRuntime, callerTaskId: string) {
  const caller = await getTask(rt.sql, callerTaskId);
  if (!caller) throw notFound('calling task not found');
  return caller;
}
