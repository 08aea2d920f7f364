import { z } from 'zod';
import { ErrorBody } from './errors.js';
import { Limits, text } from './text.js';

/** Every request/reply on NATS answers with this envelope. */
export const replyEnvelope = <T extends z.ZodType>(result: T) =>
  z.discriminatedUnion('ok', [z.object({ ok: z.literal(true), result }), z.object({ ok: z.literal(false), error: ErrorBody })]);
export type Reply<T> = { ok: true; result: T } | { ok: false; error: ErrorBody };

/** Who asked for something; the edge (gateway, mcp) verified it. */
export const OperatorActor = z.object({
  type: z.literal('operator'),
  id: text({ min: 1, max: Limits.actorId }),
  /** `['*']` = every workspace. */
  workspaces: z
    .array(text({ min: 1, max: 100 }))
    .min(1)
    .max(Limits.workspaces),
});
export const AgentActor = z.object({
  type: z.literal('agent'),
  task_id: z.uuid(),
  session_id: z.uuid().nullable().optional(),
});
export const SystemActor = z.object({ type: z.literal('system'), id: text({ min: 1, max: Limits.actorId }) });
export const Actor = z.discriminatedUnion('type', [OperatorActor, AgentActor, SystemActor]);
export type Actor = z.infer<typeof Actor>;
export type OperatorActor = z.infer<typeof OperatorActor>;

export const actorLabel = (a: Actor): string => (a.type === 'operator' ? `operator:${a.id}` : a.type === 'agent' ? `agent:${a.task_id}` : `system:${a.id}`);

/** May this operator see this workspace? */
export const canAccessWorkspace = (a: Actor, workspaceId: string): boolean =>
  a.type !== 'operator' || a.workspaces.includes('*') || a.workspaces.includes(workspaceId);

/** Header names carried on every NATS message besides W3C trace context. */
export const Headers = {
  requestId: 'kandev-request-id',
  /**
   * The caller's deadline, as the milliseconds left when the request was sent (relative, like gRPC's
   * `grpc-timeout`, so hosts need not agree on the time). The handler's own requests use what remains.
   */
  timeout: 'kandev-timeout-ms',
  /** The caller asks for a receipt and a heartbeat every this many ms until the reply (ADR 0032). */
  receipt: 'kandev-receipt-ms',
  /** On a receipt (`accepted`) or heartbeat (`working`): this message is not the reply. */
  progress: 'kandev-progress',
  /**
   * On a receipt: a subject only the handler's NATS connection subscribes to. A caller whose
   * heartbeats are late sends a request there; "no responders" means that connection is gone.
   */
  liveness: 'kandev-liveness',
  /**
   * On a request: the sending service's caller assertion, a compact JWS (Ed25519) naming the service,
   * the subject, a hash of the body, an expiry and, from the gateway, the operator (ADR 0055).
   */
  caller: 'kandev-caller',
  /** On a request a service sends while acting on a gateway request: the gateway's assertion, passed on (ADR 0055). */
  operator: 'kandev-operator',
  traceparent: 'traceparent',
  tracestate: 'tracestate',
  msgId: 'Nats-Msg-Id',
} as const;
