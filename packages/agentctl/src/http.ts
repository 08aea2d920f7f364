import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, propagation, trace } from '@opentelemetry/api';
import type {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_URL_PATH,
} from '@opentelemetry/semantic-conventions';
import {
  AgentctlCancelRequest,
  AgentctlCancelResponse,
  AgentctlErrorResponse,
  AgentctlPaths,
  AgentctlPermissionAnswerRequest,
  AgentctlPermissionAnswerResponse,
  AgentctlPromptRequest,
  AgentctlPromptResponse,
  AgentctlStatusResponse,
  AgentctlStopRequest,
  AgentctlStopResponse,
} from '@kandev/contracts/agentctl';
import { z } from 'zod';
import { AgentctlError } from './errors.js';
import type { Execution } from './execution.js';
import { errorMessage, type Logger } from './log.js';

/*
 * The loopback HTTP API: parse and validate, call the execution, validate and send the answer. The
 * W3C trace context of each request becomes the parent of its span.
 */

const MAX_BODY_BYTES = 1024 * 1024;
const tracer = trace.getTracer('@kandev/agentctl');

// The HTTP conventions' names, checked against the installed @opentelemetry/semantic-conventions by
// their types only: loading the package at run time would add ~6 ms to every agent launch, for
// names that are constants.
const HTTP_REQUEST_METHOD: typeof ATTR_HTTP_REQUEST_METHOD = 'http.request.method';
const HTTP_ROUTE: typeof ATTR_HTTP_ROUTE = 'http.route';
const HTTP_RESPONSE_STATUS_CODE: typeof ATTR_HTTP_RESPONSE_STATUS_CODE = 'http.response.status_code';
const URL_PATH: typeof ATTR_URL_PATH = 'url.path';
const ERROR_TYPE: typeof ATTR_ERROR_TYPE = 'error.type';

interface Reply {
  status: number;
  body: unknown;
  /** Runs once the response has been flushed to the client. */
  after?: () => void;
}

type Handler = (req: IncomingMessage) => Promise<Reply>;

export interface HttpOptions {
  /** The execution secret: every path but /healthz requires `Authorization: Bearer <secret>`. */
  secret: string;
  /** Called after the stop response is on the wire: agentctl exits then. */
  onStopped(): void;
}

/**
 * Whether the request carries the execution secret. Both sides are hashed first, so the compare is
 * constant-time whatever the length of what was sent (timingSafeEqual needs equal lengths).
 */
export function authorized(header: string | undefined, secret: string): boolean {
  const m = /^Bearer ([^\s]+)$/.exec(header ?? '');
  const digest = (v: string) => createHash('sha256').update(v).digest();
  return timingSafeEqual(digest(m ? m[1]! : ''), digest(secret)) && m !== null;
}

export function createHttpServer(execution: Execution, log: Logger, options: HttpOptions): Server {
  const routes: Record<string, Handler> = {
    [`GET ${AgentctlPaths.health}`]: async () => ({ status: 200, body: { ok: true } }),
    [`GET ${AgentctlPaths.status}`]: async () => ({ status: 200, body: AgentctlStatusResponse.parse(execution.status()) }),
    [`POST ${AgentctlPaths.prompt}`]: async (req) => {
      const body = await readBody(req, AgentctlPromptRequest);
      return { status: 202, body: AgentctlPromptResponse.parse(execution.startTurn(body.prompt, body.turn_id, body.context)) };
    },
    [`POST ${AgentctlPaths.cancel}`]: async (req) => {
      const body = await readBody(req, AgentctlCancelRequest);
      return { status: 200, body: AgentctlCancelResponse.parse(await execution.cancel(body.turn_id)) };
    },
    [`POST ${AgentctlPaths.permission}`]: async (req) => {
      const body = await readBody(req, AgentctlPermissionAnswerRequest);
      return { status: 200, body: AgentctlPermissionAnswerResponse.parse(execution.answerPermission(body)) };
    },
    [`POST ${AgentctlPaths.stop}`]: async (req) => {
      const body = await readBody(req, AgentctlStopRequest);
      const stopped = AgentctlStopResponse.parse(await execution.stop(body.grace_ms));
      return { status: 200, body: stopped, after: options.onStopped };
    },
  };

  return createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://agentctl').pathname;
    const route = `${req.method ?? 'GET'} ${path}`;
    // Refused before the route is looked up or the body read: an unauthenticated caller learns
    // nothing (not even which paths exist) and changes nothing.
    const handler = route === `GET ${AgentctlPaths.health}` || authorized(req.headers.authorization, options.secret) ? routes[route] : unauthorized;
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    // `METHOD /route` for a route agentctl has, the bare method for any other path (the
    // conventions' fallback: span names never carry a caller's arbitrary path).
    const known = Object.hasOwn(routes, route);
    const span = tracer.startSpan(known ? route : (req.method ?? 'GET'), { kind: SpanKind.SERVER }, parent);
    if (span.isRecording()) {
      span.setAttributes({ [HTTP_REQUEST_METHOD]: req.method ?? 'GET', [URL_PATH]: path, ...(known ? { [HTTP_ROUTE]: path } : {}) });
    }
    void context.with(trace.setSpan(parent, span), async () => {
      let reply: Reply;
      try {
        reply = handler ? await handler(req) : errorReply(new AgentctlError('NOT_FOUND', `no route ${route}`));
      } catch (err) {
        reply = errorReply(err);
        if (reply.status >= 500) log.warn({ route, status: reply.status, err: errorMessage(err) }, 'request failed');
      }
      span.setAttribute(HTTP_RESPONSE_STATUS_CODE, reply.status);
      if (reply.status >= 500) {
        span.setAttribute(ERROR_TYPE, String(reply.status));
        span.setStatus({ code: SpanStatusCode.ERROR });
      }
      span.end();
      send(res, reply);
    });
  });
}

const unauthorized: Handler = async (req) => {
  req.resume();
  return errorReply(new AgentctlError('UNAUTHORIZED', 'the execution secret is required'));
};

function send(res: ServerResponse, reply: Reply): void {
  const payload = JSON.stringify(reply.body);
  res.writeHead(reply.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload, () => reply.after?.());
}

function errorReply(err: unknown): Reply {
  const failure = err instanceof AgentctlError ? err : new AgentctlError('INTERNAL_ERROR', errorMessage(err));
  return { status: failure.status, body: AgentctlErrorResponse.parse(failure.toBody()) };
}

/** The JSON body validated by `schema`; an empty body counts as `{}`. */
async function readBody<T extends z.ZodType>(req: IncomingMessage, schema: T): Promise<z.infer<T>> {
  const text = await bodyText(req);
  let raw: unknown = {};
  if (text.trim() !== '') {
    try {
      raw = JSON.parse(text);
    } catch {
      throw new AgentctlError('BAD_REQUEST', 'body is not JSON');
    }
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw new AgentctlError('VALIDATION_ERROR', z.prettifyError(parsed.error), { details: { issues: parsed.error.issues } });
  }
  return parsed.data;
}

/**
 * The body as text, from the request's own events: a cancel's body is read on its way to the agent,
 * and an async iterator over the request costs a tenth of a millisecond more per request. Past
 * MAX_BODY_BYTES the request fails with BAD_REQUEST at once; the rest is read and dropped.
 */
function bodyText(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
      else reject(new AgentctlError('BAD_REQUEST', `body larger than ${MAX_BODY_BYTES} bytes`));
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
