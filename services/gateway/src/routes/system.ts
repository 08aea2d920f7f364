import { isKandevError, pingEndpoint } from '@kandev/contracts';
import { registry, request, type NatsConnection } from '@kandev/runtime';
import type { FastifyInstance } from 'fastify';
import { readinessReport, REQUIRED_SERVICES, type RequiredService } from '../domain/readiness.js';

const PING_TIMEOUT_MS = 1_000;

/** /healthz, /readyz and /metrics: no token, no span (probes would drown the traces). */
export function registerSystemRoutes(app: FastifyInstance, deps: { nc: NatsConnection; isStopping: () => boolean }): void {
  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/readyz', async (req, reply) => {
    const details: Partial<Record<RequiredService, Record<string, string | number | boolean>>> = {};
    const answers = await Promise.all(
      REQUIRED_SERVICES.map(async (s): Promise<[RequiredService, string | null]> => {
        try {
          const pong = await request(deps.nc, pingEndpoint(s), {}, { timeoutMs: PING_TIMEOUT_MS, requestId: req.kandev.requestId });
          if (pong.details) details[s] = pong.details;
          return [s, null];
        } catch (e) {
          return [s, isKandevError(e) ? `${e.code}: ${e.message}` : 'ping failed'];
        }
      }),
    );
    const report = readinessReport({
      natsConnected: !deps.nc.isClosed() && !deps.nc.isDraining(),
      stopping: deps.isStopping(),
      services: Object.fromEntries(answers) as Record<RequiredService, string | null>,
      details,
    });
    return reply.code(report.ready ? 200 : 503).send(report.body);
  });

  app.get('/metrics', async (_req, reply) => reply.header('content-type', registry.contentType).send(await registry.metrics()));
}
