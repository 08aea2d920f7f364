import { z } from 'zod';
import { Actor } from './envelope.js';
import { QueuedMessage } from './entities.js';
import { endpoint } from './endpoints.js';
import { Limits, text } from './text.js';

/**
 * Operator endpoints the console and the `kandev` CLI need to drive work, beside the pinned
 * surface: the agents a session may name, and a prompt queued behind the running turn. Kept apart from
 * endpoints.ts so the operator catalogue there stays the pinned routes.
 */
export const OrchOperatorExtras = {
  /** GET /agents: the names of the lifecycle catalogue (what POST /tasks/:id/sessions accepts as `agent`). */
  agentList: endpoint('orch.agent.list', z.object({ actor: Actor }), z.object({ agents: z.array(z.string()) })),
  /**
   * POST /tasks/:id/queue `{prompt}`: the operator's queued delivery. Stored in the task's queue for
   * its newest live session (CONFLICT when none, or the task is CANCELLED); delivered at once when that
   * session is idle and its queue not paused (`delivered: true`), else after the running turn.
   */
  queueAdd: endpoint(
    'orch.task.queue.add',
    z.object({ actor: Actor, task_id: z.uuid(), prompt: text({ min: 1, max: Limits.prompt }) }),
    QueuedMessage.extend({ delivered: z.boolean() }),
  ),
} as const;
