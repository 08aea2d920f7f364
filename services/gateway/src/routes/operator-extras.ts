import { OrchOperatorExtras } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import type { FastifyInstance } from 'fastify';
import { inRequestContext, operatorOf } from '../http/request-context.js';
import { bodyFields, pathId } from './api.js';

/**
 * Routes the console and the `kandev` CLI add to drive work: GET /agents (the names a
 * session may start with) and POST /tasks/:id/queue (a prompt queued behind the running turn). Like
 * routes/api.ts, each is one contracts endpoint; in a file of their own so the pinned table stays as
 * INTERFACES.md lists it.
 */
export function registerOperatorExtraRoutes(app: FastifyInstance, deps: { nc: NatsConnection; timeoutMs: number }): void {
  app.route({
    method: 'GET',
    url: '/agents',
    config: { auth: true, traced: true },
    handler: (req, reply) =>
      inRequestContext(req, async () => {
        const result = await request(
          deps.nc,
          OrchOperatorExtras.agentList,
          { actor: operatorOf(req) },
          { requestId: req.kandev.requestId, timeoutMs: deps.timeoutMs },
        );
        return reply.code(200).send(result);
      }),
  });
  app.route({
    method: 'POST',
    url: '/tasks/:id/queue',
    config: { auth: true, traced: true },
    handler: (req, reply) =>
      inRequestContext(req, async () => {
        // Path id and actor last: a body cannot name another task or claim another identity.
        // `request` validates the body against the contract (a missing prompt is VALIDATION_ERROR).
        const payload = { ...bodyFields(req.body), task_id: pathId(req), actor: operatorOf(req) } as Parameters<
          typeof request<typeof OrchOperatorExtras.queueAdd>
        >[2];
        const result = await request(deps.nc, OrchOperatorExtras.queueAdd, payload, { requestId: req.kandev.requestId, timeoutMs: deps.timeoutMs });
        return reply.code(201).send(result);
      }),
  });
}
