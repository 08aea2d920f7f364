import { OrchRead, validationError, type Endpoint } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { inboxQuery, messagesQuery, taskListQuery, workspaceListQuery, type Query } from '../domain/read-query.js';
import { inRequestContext, operatorOf } from '../http/request-context.js';

/**
 * The read routes: like routes/api.ts, one route ↔ one contracts endpoint, but their
 * input is the query string (domain/read-query.ts) rather than a body.
 */
interface ReadRoute {
  url: string;
  endpoint: Endpoint;
  fields: (q: Query) => Record<string, unknown>;
  idField: 'session_id' | 'workspace_id' | null;
}

export const READ_ROUTES: readonly ReadRoute[] = [
  { url: '/workspaces', endpoint: OrchRead.workspaceList, fields: workspaceListQuery, idField: null },
  { url: '/workspaces/:id', endpoint: OrchRead.workspaceGet, fields: () => ({}), idField: 'workspace_id' },
  { url: '/tasks', endpoint: OrchRead.taskList, fields: taskListQuery, idField: null },
  { url: '/sessions/:id/messages', endpoint: OrchRead.sessionMessages, fields: messagesQuery, idField: 'session_id' },
  // pending questions and permission requests of a workspace, children included, oldest first.
  { url: '/inbox', endpoint: OrchRead.inbox, fields: inboxQuery, idField: null },
];

const Uuid = z.uuid();
function pathId(req: FastifyRequest): string {
  const id = (req.params as Record<string, string | undefined>).id;
  if (!Uuid.safeParse(id).success) throw validationError('path parameter id must be a UUID', { param: 'id' });
  return id as string;
}

export function registerReadRoutes(app: FastifyInstance, deps: { nc: NatsConnection; timeoutMs: number }): void {
  for (const r of READ_ROUTES) {
    app.route({
      method: 'GET',
      url: r.url,
      config: { auth: true, traced: true },
      handler: (req, reply) =>
        inRequestContext(req, async () => {
          const actor = operatorOf(req);
          const fields = r.fields((req.query ?? {}) as Query);
          // Path id and actor last: a query parameter cannot name another session or claim another identity.
          const payload = { ...fields, ...(r.idField ? { [r.idField]: pathId(req) } : {}), actor };
          const result = await request(deps.nc, r.endpoint, payload, { requestId: req.kandev.requestId, timeoutMs: deps.timeoutMs });
          return reply.code(200).send(result);
        }),
    });
  }
}
