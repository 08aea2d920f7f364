import { ROOT_CONTEXT, SpanStatusCode, type Context, type Span } from '@opentelemetry/api';
import {
  ATTR_ENDUSER_ID,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  bearer,
  context,
  httpServerAttributes,
  httpServerSpanName,
  observeHttpRequest,
  propagation,
  SpanKind,
  trace,
  tracer,
  type Logger,
} from '@kandev/runtime';
import { badRequest, unavailable, type OperatorActor } from '@kandev/contracts';
import { invalidHeader } from '../domain/body.js';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { authenticate, type Operator, type VerifyOperatorToken } from '../auth.js';
import { drainsRefusedBody, errorResponseOf } from '../domain/http-errors.js';
import { requestIdFrom } from '../domain/request-id.js';

/** What the gateway knows about one HTTP request (or WebSocket upgrade) once it is routed. */
export interface RequestContext {
  requestId: string;
  log: Logger;
  /** The server span of a traced route, else null. */
  span: Span | null;
  /** Context to run the handler in, so outgoing NATS requests carry the trace. */
  otel: Context;
  started: number;
  operator: Operator | null;
  route: string;
  errorCode: string | null;
  finished: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    kandev: RequestContext;
  }
  interface FastifyContextConfig {
    /** Require an operator bearer token (checked before the body is read). */
    auth?: boolean;
    /**
     * Also accept `?ticket=` (a single-use ticket, ADR 0058) and `?token=` (discouraged: a long-lived
     * token in a URL) — WebSocket upgrades, where browsers cannot set headers.
     */
    queryToken?: boolean;
    /** Open a server span `<METHOD> <route template>` (the HTTP conventions' name) for the request. */
    traced?: boolean;
  }
}

const queryParamOf = (req: FastifyRequest, name: 'token' | 'ticket'): string | null => {
  const q = req.query as Record<string, unknown> | undefined;
  const v = q?.[name];
  return typeof v === 'string' && v.length > 0 ? v : null;
};

/** A `/ws` ticket → its operator, once (ws/tickets.ts redeemTicket). */
export type RedeemTicket = (ticket: string, requestId: string) => Promise<Operator>;

/**
 * Request id, trace span, authentication, error format and access log for every request. Runs in
 * `onRequest`, i.e. before the body is parsed: a request without a valid token is answered 401
 * whatever its body.
 */
export function installRequestLifecycle(
  app: FastifyInstance,
  deps: { log: Logger; verifyToken: VerifyOperatorToken; redeemTicket: RedeemTicket; isStopping: () => boolean },
): void {
  app.decorateRequest('kandev', null as unknown as RequestContext);

  app.addHook('onRequest', async (req, reply) => {
    const requestId = requestIdFrom(req.headers['x-request-id']);
    void reply.header('x-request-id', requestId);
    const config = req.routeOptions.config ?? {};
    const route = req.routeOptions.url ?? 'unmatched';
    let span: Span | null = null;
    let otel: Context = ROOT_CONTEXT;
    if (config.traced) {
      const parent = propagation.extract(ROOT_CONTEXT, req.headers);
      span = tracer().startSpan(httpServerSpanName(req.method, route), { kind: SpanKind.SERVER }, parent);
      // Built only for a span that records: with no exporter every span here is id-only.
      if (span.isRecording())
        span.setAttributes({ ...httpServerAttributes(req.method, route, req.url.split('?', 1)[0] ?? ''), 'kandev.request_id': requestId });
      otel = trace.setSpan(parent, span);
    }
    req.kandev = {
      requestId,
      log: deps.log.child({ request_id: requestId }),
      span,
      otel,
      started: performance.now(),
      operator: null,
      route,
      errorCode: null,
      finished: false,
    };
    // Header values are inputs like bodies: bytes that are not UTF-8 are refused, never stored as latin1.
    const badHeader = invalidHeader(req.headers);
    if (badHeader !== null) throw badRequest('request header is not valid UTF-8 text', { header: badHeader.slice(0, 100) });
    if (config.auth) {
      // Draining: refuse new API work (503, so a load balancer retries elsewhere); probes still answer.
      if (deps.isStopping()) throw unavailable('gateway is shutting down');
      const header = bearer(req.headers.authorization);
      const ticket = header === null && config.queryToken ? queryParamOf(req, 'ticket') : null;
      req.kandev.operator =
        ticket !== null
          ? await deps.redeemTicket(ticket, requestId)
          : await authenticate(deps.verifyToken, header ?? (config.queryToken ? queryParamOf(req, 'token') : null));
      span?.setAttribute(ATTR_ENDUSER_ID, req.kandev.operator.actor.id);
    }
  });

  app.addHook('onResponse', async (req, reply) => finishRequest(req, reply.statusCode));
  app.addHook('onRequestAbort', async (req) => finishRequest(req, 499));

  app.setErrorHandler((err, req, reply) => {
    const res = errorResponseOf(err);
    const k = req.kandev as RequestContext | null;
    if (k) {
      k.errorCode = res.body.error.code;
      if (res.status >= 500) k.span?.recordException(err as Error);
    }
    if (res.unexpected) (k?.log ?? deps.log).error({ err }, 'request failed');
    if (res.retryAfterS !== null) void reply.header('retry-after', String(res.retryAfterS));
    if (drainsRefusedBody(err, req.headers['content-length'])) reply.removeHeader('connection');
    return reply.code(res.status).send(res.body);
  });

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?')[0]?.slice(0, 200) ?? '';
    if (req.kandev) req.kandev.errorCode = 'NOT_FOUND';
    return reply.code(404).send({ error: { code: 'NOT_FOUND', message: `no route ${req.method} ${path}` } });
  });
}

/** End the request's span and write its access-log line (once; the WS route calls it at upgrade). */
export function finishRequest(req: FastifyRequest, status: number): void {
  const k = req.kandev as RequestContext | null;
  if (!k || k.finished) return;
  k.finished = true;
  const durationMs = Math.round((performance.now() - k.started) * 10) / 10;
  let traceId: string | undefined;
  if (k.span) {
    k.span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
    if (k.errorCode) k.span.setAttribute('kandev.error_code', k.errorCode);
    if (status >= 500) {
      // The conventions: a server span is an error from 500 on, with error.type the status code.
      k.span.setAttribute(ATTR_ERROR_TYPE, String(status));
      k.span.setStatus({ code: SpanStatusCode.ERROR });
    }
    traceId = k.span.spanContext().traceId;
    k.span.end();
  }
  // Untraced routes (probes, /metrics, console files) are not the API: RED metrics are for the API.
  if (k.span) observeHttpRequest(k.route, req.method, status, durationMs / 1000);
  const line = {
    method: req.method,
    route: k.route,
    status,
    duration_ms: durationMs,
    ...(k.errorCode ? { code: k.errorCode } : {}),
    ...(traceId ? { trace_id: traceId } : {}),
  };
  // Probes and scrapes are untraced and would drown the log at info.
  if (k.span) k.log.info(line, 'http request');
  else k.log.debug(line, 'http request');
}

/** Run a handler inside the request's trace context (log lines and NATS requests pick it up). */
export function inRequestContext<T>(req: FastifyRequest, fn: () => Promise<T>): Promise<T> {
  return context.with(req.kandev.otel, fn);
}

/** The verified operator of an authenticated route. */
export function operatorOf(req: FastifyRequest): OperatorActor {
  const op = req.kandev.operator;
  // Unreachable on routes declared with `auth: true`; a route that forgot it fails closed.
  if (!op) throw Object.assign(new Error('route is missing auth: true'), { statusCode: 500 });
  return op.actor;
}
