import { notFound, type RequestOf, type OrchMcp } from '@kandev/contracts';
import { getTask } from '../store/tasks.js';
import type { CallContext, OrchRuntime } from './context.js';
import { startSession } from './sessions.js';
import { createTask } from './tasks.js';

/** create_task_kandev: a child of the caller in the caller's workspace, optionally started. */
export async function createChildTask(rt: OrchRuntime, call: CallContext, req: RequestOf<typeof OrchMcp.createTask>) {
  const caller = await getTask(rt.sql, req.caller_task_id);
  if (!caller) throw notFound('calling task not found');
  const actor = { type: 'agent' as const, task_id: caller.id };
  const task = await createTask(rt, {
    actor,
    workspace_id: caller.workspace_id,
    parent_id: caller.id,
    title: req.title,
    description: req.description ?? null,
    agent: req.agent ?? caller.agent ?? null,
  });
  if (!req.prompt) return { ...task, session_id: null };
  const started = await startSession(rt, call, { actor, task_id: task.id, prompt: req.prompt, sender_task_id: caller.id });
  const fresh = (await getTask(rt.sql, task.id))!;
  return { ...task, status: fresh.status, updated_at: fresh.updated_at, session_id: started.session.id };
}

export async function whoami(rt: OrchRuntime, callerTaskId: string) {
  const caller = await getTask(rt.sql, callerTaskId);
  if (!caller) throw notFound('calling task not found');
  return caller;
}
