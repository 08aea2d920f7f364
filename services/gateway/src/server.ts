import fastifyWebsocket from '@fastify/websocket';
import { operatorTokenVerifier, type Logger, type NatsConnection } from '@kandev/runtime';
import { fastify, type FastifyInstance, type FastifyReply } from 'fastify';
import { decodeJsonBody, depthError } from './domain/body.js';
import { BODY_LIMIT_BYTES, clientErrorResponse, MAX_HEADER_BYTES } from './domain/http-errors.js';
import { installRequestLifecycle } from './http/request-context.js';
import { registerOperatorRateLimit } from './http/rate-limit.js';
import { registerApiRoutes } from './routes/api.js';
import { registerOpenApiRoute } from './routes/openapi.js';
import { registerPermissionRoutes } from './routes/permissions.js';
import { registerConsoleRoutes } from './routes/console.js';
import { registerReadRoutes } from './routes/read.js';
import { registerSystemRoutes } from './routes/system.js';
import { registerWebSocketRoute, WsHub } from './ws/connection.js';
import { redeemTicket, registerTicketRoute, type TicketDeps } from './ws/tickets.js';

export interface GatewayServerOptions {
  nc: NatsConnection;
  log: Logger;
  jwtSecret: string;
  /** Timeout of every NATS request made on a client's behalf. */
  timeoutMs: number;
  /** Lifetime of a /ws ticket (ADR 0058); 30 s unless a test says otherwise. */
  wsTicketTtlMs?: number;
  consoleDir: string | null;
  isStopping: () => boolean;
  /** per-operator-token rate (http/rate-limit.ts); absent or rate 0: no limit. */
  operatorRate?: { rate: number; burst: number | undefined; replicas: number };
}
export interface GatewayServer {
  app: FastifyInstance;
  hub: WsHub;
  /** Every route registered (method, URL template), for the OpenAPI coverage test. */
  routes: Array<{ method: string; url: string }>;
}

/** The gateway's Fastify instance with every route, not yet listening. */
export async function buildGatewayServer(opts: GatewayServerOptions): Promise<GatewayServer> {
  const app = fastify({
    // Logging goes through the service's pino logger (request-context), one JSON line per request.
    logger: false,
    requestIdHeader: false,
    // Fastify's own 503-on-close body is not the error shape; request-context sheds load instead.
    return503OnClosing: false,
    bodyLimit: BODY_LIMIT_BYTES,
    http: { maxHeaderSize: MAX_HEADER_BYTES },
    // Oversized headers and unparsable requests never reach a route: answer them in the error shape too.
    clientErrorHandler: (err, socket) => {
      if ((err as { code?: string }).code === 'ECONNRESET' || socket.destroyed) return;
      if (socket.writable) socket.end(clientErrorResponse(err as { code?: unknown }));
      else socket.destroy(err);
    },
    frameworkErrors: (_err, _req, reply) => {
      void (reply as unknown as FastifyReply).code(400).send({ error: { code: 'BAD_REQUEST', message: 'malformed request' } });
    },
  });

  const routes: Array<{ method: string; url: string }> = [];
  app.addHook('onRoute', (r) => {
    for (const method of Array.isArray(r.method) ? r.method : [r.method]) routes.push({ method, url: r.url });
  });

  // JSON only. An empty body with a JSON content type counts as no body (POST /tasks/:id/stop from
  // clients that always set the header); anything else that is not JSON is BAD_REQUEST, and so is
  // a body that is not UTF-8 or declares another charset (docs/limits.md): bytes are never
  // decoded into U+FFFD and stored as if the caller had sent that.
  app.removeAllContentTypeParsers();
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    const text = decodeJsonBody(req.headers['content-type'], body);
    if (typeof text !== 'string') return done(text, undefined);
    if (text.trim() === '') return done(null, undefined);
    // Depth is bounded before parsing: nothing behind (the parser, zod, JSON.stringify) recurses deeper.
    const tooDeep = depthError(text, 'request body');
    if (tooDeep) return done(tooDeep, undefined);
    // Fastify's JSON parser answers through `done` (its type also allows a promise, which it never returns).
    void parseJson(req, text, done);
  });

  const hub = new WsHub({ nc: opts.nc, log: opts.log, timeoutMs: opts.timeoutMs });
  await app.register(fastifyWebsocket, {
    options: { maxPayload: BODY_LIMIT_BYTES },
    errorHandler: (err, socket) => {
      opts.log.warn({ err }, 'websocket error');
      socket.terminate();
    },
    preClose(done) {
      hub.close();
      done();
    },
  });
  // After the websocket plugin on purpose: its onRequest hook marks upgrade requests, so when our
  // auth refuses one (401) the plugin's onResponse destroys the raw socket instead of leaking it.
  const tickets: TicketDeps = {
    nc: opts.nc,
    operatorKey: opts.jwtSecret,
    timeoutMs: opts.timeoutMs,
    ...(opts.wsTicketTtlMs ? { ttlMs: opts.wsTicketTtlMs } : {}),
  };
  installRequestLifecycle(app, {
    log: opts.log,
    verifyToken: operatorTokenVerifier(opts.jwtSecret),
    redeemTicket: (ticket, requestId) => redeemTicket(tickets, ticket, requestId),
    isStopping: opts.isStopping,
  });
  if (opts.operatorRate) await registerOperatorRateLimit(app, opts.operatorRate);

  registerSystemRoutes(app, { nc: opts.nc, isStopping: opts.isStopping });
  await registerConsoleRoutes(app, opts.consoleDir);
  registerApiRoutes(app, { nc: opts.nc, timeoutMs: opts.timeoutMs });
  registerReadRoutes(app, { nc: opts.nc, timeoutMs: opts.timeoutMs });
  registerPermissionRoutes(app, { nc: opts.nc, timeoutMs: opts.timeoutMs });
  registerTicketRoute(app, tickets);
  registerOpenApiRoute(app, { consoleServed: opts.consoleDir !== null });
  registerWebSocketRoute(app, hub);
  await app.ready();
  return { app, hub, routes };
}
