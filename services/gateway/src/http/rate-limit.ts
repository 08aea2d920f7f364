import fastifyRateLimit from '@fastify/rate-limit';
import { rateLimited, rateWindow } from '@kandev/contracts';
import { bearer } from '@kandev/runtime';
import type { FastifyInstance } from 'fastify';
import { createHash } from 'node:crypto';

/**
 * API requests per operator token (KANDEV_OPERATOR_RATE per second on average,
 * KANDEV_OPERATOR_BURST at once), by @fastify/rate-limit's fixed window, counted per replica with
 * the allowance split over GATEWAY_REPLICAS (ADR 0065). Counted after authentication (preHandler),
 * keyed by the verified token's SHA-256: requests without a token (health, metrics, the console's
 * files) and refused tokens are not counted. Over it: 429 RATE_LIMITED with Retry-After, in the
 * error shape. Must be registered before the routes (the plugin hooks each route as it is added).
 */
export async function registerOperatorRateLimit(app: FastifyInstance, opts: { rate: number; burst: number | undefined; replicas: number }): Promise<void> {
  const window = rateWindow({ rate: opts.rate, burst: opts.burst ?? Math.ceil(5 * opts.rate), replicas: opts.replicas });
  if (!window) return;
  await app.register(fastifyRateLimit, {
    global: true,
    hook: 'preHandler',
    max: window.points,
    timeWindow: window.windowMs,
    allowList: (req) => !req.kandev?.operator,
    keyGenerator: (req) =>
      createHash('sha256')
        .update(bearer(req.headers.authorization) ?? String(req.kandev?.operator?.actor.id))
        .digest('base64url'),
    errorResponseBuilder: (_req, ctx) =>
      rateLimited(
        `too many requests for this operator token: at most ${window.points} per ${window.windowMs / 1000} s; retry after ${Math.ceil(ctx.ttl / 1000)} s`,
        ctx.ttl / 1000,
        {
          limit: window.points,
          window_ms: window.windowMs,
        },
      ),
  });
}
