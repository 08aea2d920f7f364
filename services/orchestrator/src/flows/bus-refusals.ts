import { Actor, actorLabel } from '@kandev/contracts';
import type { BusRefusal, Logger, Sql } from '@kandev/runtime';
import { recordAudit } from '../store/audit.js';

/** The audit action of a request refused because its caller could not be verified on the bus (ADR 0055). */
export const BUS_REFUSAL_ACTION = 'bus.unverified_caller';

/**
 * Who the refused request claimed to be, as the audit names actors, marked unverified: the row must
 * not read as if that operator had asked.
 */
export function claimedActorLabel(actor: unknown): string {
  const parsed = Actor.safeParse(actor);
  return `${parsed.success ? actorLabel(parsed.data) : 'unknown'} (unverified)`;
}

/** The task a refused request named, if any: the audit is kept per task. */
export function taskIdOf(payload: unknown): string | undefined {
  const id = (payload as { task_id?: unknown } | null)?.task_id;
  return typeof id === 'string' ? id : undefined;
}

/**
 * Audits a refused request on the task it named (nothing else changed: the handler never ran). A
 * request that names no existing task leaves the log line the runtime wrote, since the audit is
 * kept per task.
 */
export async function auditBusRefusal(sql: Sql, r: BusRefusal, log: Logger): Promise<void> {
  const taskId = taskIdOf(r.payload);
  if (!taskId) return;
  try {
    const [task] = await sql<{ workspace_id: string }[]>`SELECT workspace_id FROM tasks WHERE id = ${taskId}`;
    if (!task) return;
    await recordAudit(sql, {
      task_id: taskId,
      workspace_id: task.workspace_id,
      action: BUS_REFUSAL_ACTION,
      actor: claimedActorLabel(r.actor),
      reason: r.reason,
      request_id: r.requestId,
      outcome: 'unauthorized',
      details: { subject: r.subject, endpoint: r.endpoint, caller: r.caller?.service ?? null },
    });
  } catch (err) {
    log.error({ err, subject: r.subject }, 'could not audit a request refused for its caller');
  }
}
