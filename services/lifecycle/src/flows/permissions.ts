import {
  conflict,
  notFound,
  PERMISSION_LIMITS,
  unavailable,
  validationError,
  type AgentctlPermissionRequestedEvent,
  type AgentctlPermissionResolvedEvent,
  type EventDataOf,
  type LifePermission,
  type PermissionAnswered,
  type RequestOf,
} from '@kandev/contracts';
import { AgentctlHttpError, AgentctlUnreachable } from '../agentctl/client.js';
import type { LiveExecution } from '../live-execution.js';

/*
 * Permission requests on the lifecycle's side: agentctl's `permission_requested` and
 * `permission_resolved` lines become `agent.permission_*` events for the orchestrator, which owns
 * the rows; the operator's answer comes back on `life.<instance>.exec.permission.respond` and goes
 * to the owning agentctl, whose pending table settles each request once.
 */

type Asked = EventDataOf<'agent.permission_requested'>;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** How long agentctl has to answer: settling a request is a map lookup and one write to the agent. */
const ANSWER_TIMEOUT_MS = 5_000;

/**
 * The requests of each execution still waiting, so a resolution can carry its request (a consumer
 * that meets it first still records the row). Dropped with the execution.
 */
const waiting = new WeakMap<LiveExecution, Map<string, Asked>>();

const cut = (s: string, max: number) => (s.length > max ? s.slice(0, max) : s);

/** agentctl's `permission_requested` line as event data; the agent's strings are bounded here. */
export function permissionAsked(x: LiveExecution, ev: AgentctlPermissionRequestedEvent): Asked {
  const asked: Asked = {
    execution_id: x.id,
    permission_id: ev.permission_id,
    turn_id: ev.turn_id && UUID.test(ev.turn_id) ? ev.turn_id : null,
    title: cut(ev.title, PERMISSION_LIMITS.title),
    options: ev.options
      .slice(0, PERMISSION_LIMITS.options)
      .filter((o) => o.id.length > 0)
      .map((o) => ({
        option_id: cut(o.id, PERMISSION_LIMITS.optionId),
        name: cut(o.name, PERMISSION_LIMITS.optionName),
        kind: cut(o.kind, PERMISSION_LIMITS.optionKind),
      })),
  };
  let mine = waiting.get(x);
  if (!mine) waiting.set(x, (mine = new Map()));
  mine.set(ev.permission_id, asked);
  return asked;
}

/** agentctl's `permission_resolved` line as event data, with the request it ends when still known. */
export function permissionResolved(x: LiveExecution, ev: AgentctlPermissionResolvedEvent): EventDataOf<'agent.permission_resolved'> {
  const mine = waiting.get(x);
  const asked = mine?.get(ev.permission_id) ?? null;
  mine?.delete(ev.permission_id);
  return {
    execution_id: x.id,
    permission_id: ev.permission_id,
    turn_id: ev.turn_id && UUID.test(ev.turn_id) ? ev.turn_id : null,
    outcome: ev.outcome,
    option_id: ev.option_id ?? null,
    asked: asked ? { title: asked.title, options: asked.options } : null,
  };
}

/**
 * The operator's answer to the owning agentctl. agentctl is the arbiter against a turn cancel: an
 * answer to a request it already settled is CONFLICT with how it ended (`details.outcome`,
 * `details.option_id`), so the orchestrator's row can tell the truth.
 */
export async function answerPermission(x: LiveExecution, req: RequestOf<typeof LifePermission.respond>): Promise<PermissionAnswered> {
  if (!x.client) throw conflict('agent not running', { execution_id: x.id, status: x.record.status });
  const choice = req.cancelled ? { cancel: true as const } : { option_id: req.option_id! };
  try {
    const answer = await x.client.answerPermission({ permission_id: req.permission_id, ...choice }, ANSWER_TIMEOUT_MS);
    x.log.info({ permission_id: req.permission_id, outcome: answer.outcome, option_id: answer.option_id ?? null }, 'permission answered');
    return { permission_id: answer.permission_id, outcome: answer.outcome, option_id: answer.option_id ?? null };
  } catch (e) {
    if (e instanceof AgentctlHttpError) {
      if (e.status === 409) {
        const outcome = e.details?.outcome;
        const optionId = e.details?.option_id;
        throw conflict(`permission request was already ${typeof outcome === 'string' ? outcome : 'settled'}`, {
          permission_id: req.permission_id,
          outcome: typeof outcome === 'string' ? outcome : 'cancelled',
          option_id: typeof optionId === 'string' ? optionId : null,
        });
      }
      if (e.status === 404) throw notFound('the agent is not waiting on this permission request', { permission_id: req.permission_id, execution_id: x.id });
      if (e.code === 'VALIDATION_ERROR') throw validationError(e.message, { permission_id: req.permission_id });
    }
    if (e instanceof AgentctlUnreachable || (e instanceof AgentctlHttpError && e.status === 503)) throw unavailable('agent not running', e);
    throw unavailable(`agentctl refused the answer: ${(e as Error).message}`, e);
  }
}
