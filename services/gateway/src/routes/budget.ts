import { Budget } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import type { FastifyInstance } from 'fastify';
import { inRequestContext, operatorOf } from '../http/request-context.js';
import { bodyFields, pathId } from './api.js';

/**
 * B-8 tree budgets: PUT / GET / DELETE /tasks/:id/tree/budget. As every API route, the body, the
 * path id and the verified operator become the endpoint's request, validated by the contract
 * before it leaves; the holds service owns budgets (docs/decisions/0066-tree-budgets-live-with-the-costs.md).
 */
export function registerBudgetRoutes(app: FastifyInstance, deps: { nc: NatsConnection; timeoutMs: number }): void {
  const opts = (requestId: string) => ({ requestId, timeoutMs: deps.timeoutMs });
  app.put('/tasks/:id/tree/budget', { config: { auth: true, traced: true } }, (req, reply) =>
    inRequestContext(req, async () => {
      // Path id and actor last: a body cannot name another task or claim another identity.
      const payload = { ...bodyFields(req.body), task_id: pathId(req), actor: operatorOf(req) };
      const result = await request(deps.nc, Budget.set, payload as Parameters<typeof request<typeof Budget.set>>[2], opts(req.kandev.requestId));
      return reply.code(200).send(result);
    }),
  );
  app.get('/tasks/:id/tree/budget', { config: { auth: true, traced: true } }, (req, reply) =>
    inRequestContext(req, async () => {
      const result = await request(deps.nc, Budget.get, { task_id: pathId(req), actor: operatorOf(req) }, opts(req.kandev.requestId));
      return reply.code(200).send(result);
    }),
  );
  app.delete('/tasks/:id/tree/budget', { config: { auth: true, traced: true } }, (req, reply) =>
    inRequestContext(req, async () => {
      await request(deps.nc, Budget.remove, { task_id: pathId(req), actor: operatorOf(req) }, opts(req.kandev.requestId));
      return reply.code(204).send();
    }),
  );
}
