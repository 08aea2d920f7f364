import { Orch } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import { cancelAgentTurn } from '../flows/cancel.js';
import type { OrchRuntime } from '../flows/context.js';
import { deleteQueued, resumeQueue } from '../flows/queue.js';
import { promptSession, sessionDetail } from '../flows/sessions.js';
import { startSession } from '../flows/start-session.js';
import { taskExecutions } from '../flows/registry-view.js';
import { stopTask } from '../flows/stop.js';
import { createTask, createWorkspace, getTaskWithSessions, taskAudit, taskQueue, updateTask } from '../flows/tasks.js';
import { toSession } from '../store/rows.js';
import { assertCanAccess } from '../domain/access.js';
import { getTask } from '../store/tasks.js';

/** The operator surface (reached through the gateway). Thin: validate (done by the runtime), call the flow. */
export const operatorEndpoints = (rt: OrchRuntime): Registration[] => [
  on(Orch.workspaceCreate, (req) => createWorkspace(rt, req.actor, req.name)),
  on(Orch.taskCreate, (req, ctx) => createTask(rt, ctx, req)),
  on(Orch.taskGet, (req) => getTaskWithSessions(rt, req.actor, req.task_id)),
  on(Orch.taskUpdate, (req, ctx) => updateTask(rt, ctx, req)),
  on(Orch.sessionStart, async (req, ctx) => {
    const task = assertCanAccess(req.actor, await getTask(rt.sql, req.task_id)); // access check before any effect
    const started = await startSession(rt, ctx, {
      actor: req.actor,
      task_id: task.id,
      agent: req.agent,
      prompt: req.prompt,
      idempotency_key: req.idempotency_key,
    });
    // A start that launched nothing (an Idempotency-Key retry, or one that joined the start in flight,
    // ADR 0060) answers the session it found: 200, not 201.
    return { ...toSession(started.session), ...(started.replayed || started.joined ? { replayed: true } : {}) };
  }),
  on(Orch.sessionGet, (req) => sessionDetail(rt, req.actor, req.session_id)),
  on(Orch.sessionPrompt, (req, ctx) => promptSession(rt, ctx, req.actor, req.session_id, req.prompt, req.idempotency_key)),
  on(Orch.agentCancel, (req, ctx) => cancelAgentTurn(rt, ctx, req.actor, req.session_id, req.reason ?? null)),
  on(Orch.taskStop, (req, ctx) => stopTask(rt, ctx, req.actor, req.task_id, req.reason ?? null)),
  on(Orch.taskExecutions, (req, ctx) => taskExecutions(rt, ctx, req.actor, req.task_id)),
  on(Orch.taskQueue, (req) => taskQueue(rt, req.actor, req.task_id)),
  on(Orch.taskQueueDelete, (req, ctx) => deleteQueued(rt, ctx, req.actor, req.task_id, req.message_id)),
  on(Orch.taskQueueResume, (req, ctx) => resumeQueue(rt, ctx, req.actor, req.task_id)),
  on(Orch.taskAudit, (req) => taskAudit(rt, req.actor, req.task_id)),
];
