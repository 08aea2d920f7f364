import { OrchPermission } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import type { FastifyInstance } from 'fastify';
import { inRequestContext, operatorOf } from '../http/request-context.js';
import { bodyFields, pathId } from './api.js';

/**
 * R-8.3: agents' permission requests. As every API route, the body, the path id and the verified
 * operator become the endpoint's request (validated by the contract before it leaves).
 */
export function registerPermissionRoutes(app: FastifyInstance, deps: { nc: NatsConnection; timeoutMs: number }): void {
  app.get('/tasks/:id/permissions', { config: { auth: true, traced: true } }, (req, reply) =>
    inRequestContext(req, async () => {
      const result = await request(
        deps.nc,
        OrchPermission.ofTask,
        { task_id: pathId(req), actor: operatorOf(req) },
        { requestId: req.kandev.requestId, timeoutMs: deps.timeoutMs },
      );
      return reply.code(200).send(result);
    }),
  );
  app.post('/permissions/:id/respond', { config: { auth: true, traced: true } }, (req, reply) =>
    inRequestContext(req, async () => {
      // Path id and actor last: a body cannot name another request or claim another identity.
      const payload = { ...bodyFields(req.body), permission_request_id: pathId(req), actor: operatorOf(req) };
      const result = await request(deps.nc, OrchPermission.respond, payload as Parameters<typeof request<typeof OrchPermission.respond>>[2], {
        requestId: req.kandev.requestId,
        timeoutMs: deps.timeoutMs,
      });
      return reply.code(200).send(result);
    }),
  );
}
