import {
  ConversationLimits,
  conflict,
  notFound,
  type ChildConversation,
  type ChildSummary,
  type OrchMcpCoord,
  type RequestOf,
  type SpawnResult,
} from '@kandev/contracts';
import { assertDirectParent } from '../domain/access.js';
import { fitConversationPage } from '../domain/conversation.js';
import { childrenOf, latestSessionOf, liveSessionsOf } from '../store/coordination.js';
import { getTask } from '../store/tasks.js';
import { transcriptPage } from '../store/transcript.js';
import type { CallContext, OrchRuntime } from './context.js';
import { startSession } from './start-session.js';

/*
 * what a coordinating agent reads about its direct children, and its restart of one. The
 * caller is the verified token's task (endpoints/coordination.ts); every check below finishes
 * before anything is read about the target or written: a caller that is not the target's
 * direct parent in its workspace learns nothing but FORBIDDEN.
 */

type Req<K extends keyof typeof OrchMcpCoord> = RequestOf<(typeof OrchMcpCoord)[K]>;

/** The caller and a target it is the direct parent of, or NOT_FOUND / FORBIDDEN. */
async function callerAndChild(rt: OrchRuntime, callerId: string, targetId: string) {
  const [caller, target] = await Promise.all([getTask(rt.sql, callerId), getTask(rt.sql, targetId)]);
  if (!caller) throw notFound('calling task not found');
  if (!target) throw notFound('task not found');
  assertDirectParent(caller, target);
  return { caller, target };
}

/** Most children one list_tasks_kandev answers (an agent makes at most KANDEV_MAX_CHILDREN; an operator may add more): the oldest ones. */
const LIST_CAP = 500;

/** list_tasks_kandev: the caller's direct children, oldest first. */
export async function listChildren(rt: OrchRuntime, req: Req<'listChildren'>): Promise<{ tasks: ChildSummary[] }> {
  const caller = await getTask(rt.sql, req.caller_task_id);
  if (!caller) throw notFound('calling task not found');
  return { tasks: await childrenOf(rt.sql, caller.id, LIST_CAP) };
}

/** get_task_conversation_kandev: a page of the transcript of the child's latest session, bounded in items and bytes. */
export async function childConversation(rt: OrchRuntime, req: Req<'childConversation'>): Promise<ChildConversation> {
  const { target } = await callerAndChild(rt, req.caller_task_id, req.task_id);
  const sessionId = await latestSessionOf(rt.sql, target.id);
  if (!sessionId) return { task_id: target.id, session_id: null, items: [], next_seq: null };
  const limit = Math.min(req.limit ?? ConversationLimits.defaultItems, ConversationLimits.maxItems);
  const rows = await transcriptPage(rt.sql, sessionId, req.after_seq ?? 0, limit + 1);
  return { task_id: target.id, session_id: sessionId, ...fitConversationPage(rows, limit, ConversationLimits.maxBytes) };
}

/**
 * spawn_session_kandev: a new session on a direct child that has none live, through the operator's
 * start (startSession and its one start rule, domain/start.ts: archived, held and CANCELLED are
 * refused; `live_session: 'refuse'` refuses a live one, a start in flight included, under the
 * child's row lock, so of two spawns racing one starts a session and the other is CONFLICT). A live
 * session is refused here first as well, for a clear answer before lifecycle is asked for capacity.
 */
export async function spawnSession(rt: OrchRuntime, call: CallContext, req: Req<'spawnSession'>): Promise<SpawnResult> {
  const { caller, target } = await callerAndChild(rt, req.caller_task_id, req.task_id);
  const live = await liveSessionsOf(rt.sql, target.id);
  if (live.length > 0) throw conflict('task already has a live session', { session_id: live[0]!.id, state: live[0]!.state });
  const started = await startSession(rt, call, {
    actor: { type: 'agent', task_id: caller.id },
    task_id: target.id,
    agent: req.agent,
    prompt: req.prompt,
    sender_task_id: caller.id,
    live_session: 'refuse',
  });
  return { task_id: target.id, session_id: started.session.id, status: 'started' };
}
