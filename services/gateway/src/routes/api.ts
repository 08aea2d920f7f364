import { Budget, Holds, Orch, OrchClarification, OrchOperatorExtras, OrchTree, validationError, type Endpoint } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { headerText } from '../domain/body.js';
import { inRequestContext, operatorOf } from '../http/request-context.js';

/**
 * One public HTTP route ↔ one contracts endpoint. The gateway adds nothing but identity:
 * the JSON body, the path id and the verified operator become the endpoint's request, which
 * `request` validates against the contract before it leaves (so a bad body is VALIDATION_ERROR with
 * the contract's issues), and the endpoint's result is the response body.
 */
interface ApiRoute {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  url: string;
  endpoint: Endpoint;
  /** Response status; a function when the result decides it (a duplicate cost event is 200, a new one 201). */
  status: 200 | 201 | 202 | 204 | ((result: unknown) => number);
  /** The request field that `:id` fills. */
  idField: 'task_id' | 'session_id' | 'wakeup_id' | 'bundle_id' | null;
  /** Whether the route forwards a JSON body (absent body = `{}`). */
  body: boolean;
  /** Path parameters besides `:id` (each a UUID): parameter name → request field. */
  params?: Record<string, string>;
  /**
   * The `Idempotency-Key` header becomes the request's `idempotency_key` (B-5, B-7): a retry with
   * the same key answers the first result and acts once. A body naming another key is VALIDATION_ERROR.
   */
  idempotencyHeader?: true;
}

/** A replayed answer (`replayed: true`) is 200; a new one the route's own status. */
const createdUnlessReplayed = (fresh: 201 | 202) => (r: unknown) => ((r as { replayed?: boolean }).replayed ? 200 : fresh);

export const API_ROUTES: readonly ApiRoute[] = [
  { method: 'POST', url: '/workspaces', endpoint: Orch.workspaceCreate, status: 201, idField: null, body: true },
  { method: 'POST', url: '/tasks', endpoint: Orch.taskCreate, status: 201, idField: null, body: true, idempotencyHeader: true },
  { method: 'GET', url: '/tasks/:id', endpoint: Orch.taskGet, status: 200, idField: 'task_id', body: false },
  { method: 'PATCH', url: '/tasks/:id', endpoint: Orch.taskUpdate, status: 200, idField: 'task_id', body: true },
  {
    method: 'POST',
    url: '/tasks/:id/sessions',
    endpoint: Orch.sessionStart,
    status: createdUnlessReplayed(201),
    idField: 'task_id',
    body: true,
    idempotencyHeader: true,
  },
  { method: 'POST', url: '/tasks/:id/stop', endpoint: Orch.taskStop, status: 200, idField: 'task_id', body: true },
  { method: 'GET', url: '/tasks/:id/executions', endpoint: Orch.taskExecutions, status: 200, idField: 'task_id', body: false },
  { method: 'GET', url: '/tasks/:id/queue', endpoint: Orch.taskQueue, status: 200, idField: 'task_id', body: false },
  {
    method: 'DELETE',
    url: '/tasks/:id/queue/:message_id',
    endpoint: Orch.taskQueueDelete,
    status: 200,
    idField: 'task_id',
    body: false,
    params: { message_id: 'message_id' },
  },
  { method: 'POST', url: '/tasks/:id/queue/resume', endpoint: Orch.taskQueueResume, status: 200, idField: 'task_id', body: false },
  // The operator's queued delivery: stored behind the running turn, delivered at once to an idle session.
  { method: 'POST', url: '/tasks/:id/queue', endpoint: OrchOperatorExtras.queueAdd, status: 201, idField: 'task_id', body: true },
  // The catalogue's agent names a session may start with (the console's and the CLI's picker).
  { method: 'GET', url: '/agents', endpoint: OrchOperatorExtras.agentList, status: 200, idField: null, body: false },
  { method: 'GET', url: '/tasks/:id/audit', endpoint: Orch.taskAudit, status: 200, idField: 'task_id', body: false },
  { method: 'GET', url: '/sessions/:id', endpoint: Orch.sessionGet, status: 200, idField: 'session_id', body: false },
  { method: 'POST', url: '/sessions/:id/prompt', endpoint: Orch.sessionPrompt, status: 202, idField: 'session_id', body: true, idempotencyHeader: true },
  { method: 'POST', url: '/sessions/:id/cancel', endpoint: Orch.agentCancel, status: 200, idField: 'session_id', body: true },
  // Task subtree controls: holds live with the task tree in the orchestrator; wakeups and costs in the holds service.
  { method: 'POST', url: '/tasks/:id/tree/preview', endpoint: OrchTree.preview, status: 200, idField: 'task_id', body: false },
  { method: 'POST', url: '/tasks/:id/tree/pause', endpoint: OrchTree.pause, status: 200, idField: 'task_id', body: true },
  { method: 'POST', url: '/tasks/:id/tree/resume', endpoint: OrchTree.resume, status: 200, idField: 'task_id', body: true },
  { method: 'POST', url: '/tasks/:id/tree/cancel', endpoint: OrchTree.cancel, status: 200, idField: 'task_id', body: true },
  { method: 'POST', url: '/tasks/:id/tree/restore', endpoint: OrchTree.restore, status: 200, idField: 'task_id', body: true },
  { method: 'GET', url: '/tasks/:id/tree/cost-summary', endpoint: Holds.costSummary, status: 200, idField: 'task_id', body: false },
  // B-8 tree budgets, owned by the holds service (ADR 0066).
  { method: 'PUT', url: '/tasks/:id/tree/budget', endpoint: Budget.set, status: 200, idField: 'task_id', body: true },
  { method: 'GET', url: '/tasks/:id/tree/budget', endpoint: Budget.get, status: 200, idField: 'task_id', body: false },
  { method: 'DELETE', url: '/tasks/:id/tree/budget', endpoint: Budget.remove, status: 204, idField: 'task_id', body: false },
  {
    method: 'POST',
    url: '/cost-events',
    endpoint: Holds.costRecord,
    status: (r) => ((r as { duplicate?: boolean }).duplicate ? 200 : 201),
    idField: null,
    body: true,
  },
  { method: 'POST', url: '/wakeups', endpoint: Holds.wakeupCreate, status: 201, idField: null, body: true },
  { method: 'GET', url: '/wakeups/:id', endpoint: Holds.wakeupGet, status: 200, idField: 'wakeup_id', body: false },
  { method: 'GET', url: '/tasks/:id/clarifications', endpoint: OrchClarification.ofTask, status: 200, idField: 'task_id', body: false },
  { method: 'GET', url: '/clarification/:id', endpoint: OrchClarification.get, status: 200, idField: 'bundle_id', body: false },
  { method: 'POST', url: '/clarification/:id/respond', endpoint: OrchClarification.respond, status: 200, idField: 'bundle_id', body: true },
  { method: 'POST', url: '/clarification/:id/cancel', endpoint: OrchClarification.cancel, status: 200, idField: 'bundle_id', body: true },
];

const Uuid = z.uuid();

/** A path id that is not a UUID is the caller's mistake: VALIDATION_ERROR (400), not NOT_FOUND. */
export function pathId(req: FastifyRequest): string {
  const id = (req.params as Record<string, string | undefined>).id;
  if (!Uuid.safeParse(id).success) throw validationError('path parameter id must be a UUID', { param: 'id' });
  return id as string;
}

function extraParams(req: FastifyRequest, params: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [param, field] of Object.entries(params ?? {})) {
    const value = (req.params as Record<string, string | undefined>)[param];
    if (!Uuid.safeParse(value).success) throw validationError(`path parameter ${param} must be a UUID`, { param });
    out[field] = value as string;
  }
  return out;
}

/** The Idempotency-Key header as the request's `idempotency_key` (the contract bounds its length). */
function idempotencyField(req: FastifyRequest, fields: Record<string, unknown>): Record<string, unknown> {
  const header = req.headers['idempotency-key'];
  if (header === undefined) return {};
  // Checked as UTF-8 in onRequest; decoded here so a non-ASCII key is the text the caller sent.
  const key = headerText(Array.isArray(header) ? (header[0] ?? '') : header);
  if (fields.idempotency_key !== undefined && fields.idempotency_key !== key)
    throw validationError('Idempotency-Key header and body idempotency_key differ', { field: 'idempotency_key' });
  return { idempotency_key: key };
}

export function bodyFields(body: unknown): Record<string, unknown> {
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body)) throw validationError('request body must be a JSON object');
  return body as Record<string, unknown>;
}

export function registerApiRoutes(app: FastifyInstance, deps: { nc: NatsConnection; timeoutMs: number }): void {
  for (const r of API_ROUTES) {
    app.route({
      method: r.method,
      url: r.url,
      config: { auth: true, traced: true },
      handler: (req, reply) =>
        inRequestContext(req, async () => {
          const actor = operatorOf(req);
          const fields = r.body ? bodyFields(req.body) : {};
          // Path id and actor are set last: a body cannot name another task or claim another identity.
          const keyed = r.idempotencyHeader ? idempotencyField(req, fields) : {};
          const payload = { ...fields, ...keyed, ...extraParams(req, r.params), ...(r.idField ? { [r.idField]: pathId(req) } : {}), actor };
          const result = await request(deps.nc, r.endpoint, payload, { requestId: req.kandev.requestId, timeoutMs: deps.timeoutMs });
          const status = typeof r.status === 'function' ? r.status(result) : r.status;
          return status === 204 ? reply.code(204).send() : reply.code(status).send(result);
        }),
    });
  }
}
