/**
 * MCP over Streamable HTTP, specification revision 2025-11-25
 * (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#streamable-http), in
 * its stateless, JSON-answer form. The SDK provides the transport (`StreamableHTTPServerTransport`)
 * and the JSON-RPC dispatch (`Server`, protocol.ts); this file is the HTTP front in front of it
 * (ADR 0042): routes, Origin/Host, bearer auth and execution liveness, the server span, the body
 * (read here: 4 MiB, UTF-8 or 400), and cancellation across replicas. Conformance:
 * test/conformance.test.ts runs the official suite against it.
 */
import { Headers as KandevHeaders, isKandevError } from '@kandev/contracts';
import {
  agentTokenVerifier,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  bearer,
  context,
  httpServerAttributes,
  httpServerSpanName,
  observeHttpRequest,
  product,
  propagation,
  SpanKind,
  trace,
  tracer,
  type AgentClaims,
  type Logger,
  type NatsConnection,
} from '@kandev/runtime';
import { ROOT_CONTEXT, SpanStatusCode } from '@opentelemetry/api';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ErrorCode } from '@modelcontextprotocol/sdk/types.js';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { originPolicy, originRefusal, type OriginPolicy } from './domain/origin.js';
import { CallCancellations } from './cancellation.js';
import type { ExecutionLiveness } from './execution-liveness.js';
import { connect, serverFor, type RunTool } from './protocol.js';
import type { RateRefusal } from './rate-limit.js';
import { callTool, type CallScope } from './tool-call.js';

export interface McpHttpOptions {
  host: string;
  port: number;
  jwtSecret: string;
  requestTimeoutMs: number;
  nc: NatsConnection;
  log: Logger;
  /** This replica's instance id: names it in the cancellations it publishes to the others. */
  instanceId: string;
  /** `MCP_ALLOWED_ORIGINS` (unset: the loopback origins of this port), domain/origin.ts. */
  allowedOrigins?: string | undefined;
  /** `MCP_ALLOWED_HOSTS` (unset: loopback names when bound to loopback, else unchecked). */
  allowedHosts?: string | undefined;
  /** Refuses tokens whose execution has ended (SPEC ); absent: tokens are checked by signature and expiry only. */
  liveness?: ExecutionLiveness;
  /** the per-token request rate (rate-limit.ts); null or absent: no limit. */
  rateLimit?: ((token: string) => Promise<RateRefusal | null>) | null;
}

export interface McpHttp {
  url: string;
  close(): Promise<void>;
}

/** JSON-RPC error codes the SDK's own HTTP layer uses for transport-level failures. */
const JSONRPC_UNAUTHORIZED = -32001;
const JSONRPC_SERVER_ERROR = -32000;
/** The SDK transport's body limit (server/requestBody.js): the body is read here, so the limit is applied here. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

function jsonRpcError(res: ServerResponse, status: number, code: number, message: string, extraHeaders: Record<string, string> = {}): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { 'content-type': 'application/json', ...extraHeaders });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

/**
 * Over the token's rate: HTTP 429 with `Retry-After`, before the body is read or anything is
 * dispatched, answered as a JSON-RPC error whose message is the pinned failure text
 * (`backend error [RATE_LIMITED]: …`) and whose data is the error body, so a client that surfaces
 * the HTTP body (the SDK's does) shows the agent the code and when to retry (ADR 0065).
 */
function rateLimitedAnswer(res: ServerResponse, r: RateRefusal): void {
  const message = `too many MCP requests for this agent token: at most ${r.limit} per ${r.windowMs / 1000} s; retry after ${r.retryAfterS} s`;
  if (res.headersSent) return void res.end();
  res.writeHead(429, { 'content-type': 'application/json', 'retry-after': String(r.retryAfterS) });
  res.end(
    JSON.stringify({
      jsonrpc: '2.0',
      error: {
        code: JSONRPC_SERVER_ERROR,
        message: `backend error [RATE_LIMITED]: ${message}`,
        data: { code: 'RATE_LIMITED', message, details: { retry_after_s: r.retryAfterS, limit: r.limit, window_ms: r.windowMs } },
      },
      id: null,
    }),
  );
}

/** A JSON-RPC message, or a batch, that holds at least one request (a method and an id). */
function carriesRequest(body: unknown): boolean {
  const isRequest = (m: unknown) => typeof m === 'object' && m !== null && 'method' in m && 'id' in m;
  return Array.isArray(body) ? body.some(isRequest) : isRequest(body);
}

type Auth = { ok: true; claims: AgentClaims; token: string } | { ok: false; message: string; presented: boolean; unavailable?: boolean };

async function authenticate(req: IncomingMessage, verify: (token: string) => Promise<AgentClaims>): Promise<Auth> {
  const token = bearer(req.headers.authorization);
  if (!token) return { ok: false, message: 'missing bearer token', presented: false };
  try {
    return { ok: true, claims: await verify(token), token };
  } catch (e) {
    // The registry could not say whether the execution lives: not the token's fault (503, retry).
    if (isKandevError(e) && e.code === 'UNAVAILABLE') return { ok: false, message: e.message, presented: true, unavailable: true };
    return { ok: false, message: isKandevError(e) ? e.message : 'invalid token', presented: true };
  }
}

const first = (h: string | string[] | undefined) => (Array.isArray(h) ? h[0] : h);
/** JSON is UTF-8 (RFC 8259 §8.1): a declared charset must say so; none means UTF-8. */
function charsetIsUtf8(contentType: string): boolean {
  const m = /;\s*charset\s*=\s*"?([^";\s]*)"?/i.exec(contentType);
  return !m || /^utf-?8$/i.test(m[1]!);
}
/** Refuses bytes that are not UTF-8 instead of storing U+FFFD in their place (docs/limits.md). */
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The body as bytes, or null once it passes `limit` bytes (reading stops; the caller answers and closes). */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | null> {
  if (Number(req.headers['content-length']) > limit) return Promise.resolve(null);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer) => {
      size += c.length;
      if (size <= limit) return void chunks.push(c);
      req.off('data', onData);
      req.pause();
      resolve(null);
    };
    req.on('data', onData);
    req.on('end', () => resolve(Buffer.concat(chunks, size)));
    req.on('error', reject);
  });
}

/** After a 413: how much more of the body is read and dropped, and for how long, before the connection goes. */
/** The one route of the MCP transport (http.route of its spans). */
const MCP_ROUTE = '/mcp';

const LINGER_BYTES = 4 * MAX_BODY_BYTES;
const LINGER_MS = 5_000;

/**
 * After an early answer (413) the rest of the body is read and dropped, within bounds, before the
 * connection is closed. Closing a socket that still has unread data sends a reset, and a client
 * still sending its body (one streamed without a length, say) may then get the reset instead of
 * the 413 that is already on its way (a "lingering close", as web servers do). Once the body ends
 * the connection is reusable; past LINGER_BYTES or LINGER_MS it is dropped.
 */
function dropRestOfBody(req: IncomingMessage): void {
  let dropped = 0;
  const timer = setTimeout(() => req.destroy(), LINGER_MS);
  timer.unref();
  req.on('data', (c: Buffer) => {
    dropped += c.length;
    if (dropped > LINGER_BYTES) req.destroy();
  });
  req.once('close', () => clearTimeout(timer));
  req.resume();
}

/**
 * The charset (415) and the body, read and checked here (413 over MAX_BODY_BYTES; 400 when not
 * UTF-8 or not JSON, which the SDK would decode with U+FFFD): the parsed body, or null once an
 * error is answered.
 */
async function readJsonBody(req: IncomingMessage, res: ServerResponse): Promise<{ body: unknown } | null> {
  const contentType = first(req.headers['content-type']);
  if (contentType && !charsetIsUtf8(contentType)) {
    jsonRpcError(res, 415, JSONRPC_SERVER_ERROR, 'Unsupported Media Type: the charset must be utf-8');
    return null;
  }
  const bytes = await readBody(req, MAX_BODY_BYTES);
  if (bytes === null) {
    res.on('finish', () => dropRestOfBody(req));
    jsonRpcError(res, 413, JSONRPC_SERVER_ERROR, `Payload Too Large: Request body must not exceed ${MAX_BODY_BYTES} bytes`);
    return null;
  }
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    jsonRpcError(res, 400, ErrorCode.ParseError, 'Parse error: the body is not valid UTF-8');
    return null;
  }
  try {
    return { body: JSON.parse(text) as unknown };
  } catch {
    jsonRpcError(res, 400, ErrorCode.ParseError, 'Parse error: Invalid JSON');
    return null;
  }
}

/**
 * One HTTP server span per request to /mcp (`POST /mcp`), continuing the caller's trace, with
 * `serve` run inside it: the tool calls in its body are its children. It ends, and the request is
 * counted, when the response is sent or the connection dropped.
 */
function inRequestSpan(req: IncomingMessage, res: ServerResponse, path: string, serve: () => Promise<void>): void {
  const parent = req.headers.traceparent ? propagation.extract(ROOT_CONTEXT, req.headers) : ROOT_CONTEXT;
  const method = req.method ?? 'GET';
  const span = tracer().startSpan(httpServerSpanName(method, MCP_ROUTE), { kind: SpanKind.SERVER }, parent);
  if (span.isRecording()) span.setAttributes(httpServerAttributes(method, MCP_ROUTE, path));
  const started = performance.now();
  const ended = product.mcpRequestStarted();
  res.once('close', () => {
    ended();
    observeHttpRequest(MCP_ROUTE, method, res.statusCode, (performance.now() - started) / 1000);
    span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, res.statusCode);
    if (res.statusCode >= 500) {
      span.setAttribute(ATTR_ERROR_TYPE, String(res.statusCode));
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end();
  });
  void context.with(trace.setSpan(parent, span), serve);
}

/** What serving one POST needs: the options, the token check, the calls in flight. */
interface McpDeps {
  opts: McpHttpOptions;
  verify: (token: string) => Promise<Awaited<ReturnType<ReturnType<typeof agentTokenVerifier>>>>;
  inFlight: CallCancellations;
}

/**
 * One POST to /mcp: the bearer token and its execution (401 / 503), 405 for anything but POST, the
 * body (readJsonBody), the token's rate, then a per-POST SDK `Server` on its Streamable HTTP
 * transport, whose tool calls run under this request's span and can be cancelled from any replica.
 */
async function serveMcp(deps: McpDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { opts, verify, inFlight } = deps;
  const { log } = opts;
  const auth = await authenticate(req, verify);
  if (!auth.ok) {
    if (auth.unavailable) return jsonRpcError(res, 503, JSONRPC_SERVER_ERROR, `Service Unavailable: ${auth.message}`, { 'retry-after': '1' });
    log.info({ reason: auth.message, method: req.method }, 'mcp request rejected: unauthorized');
    const challenge = auth.presented ? 'Bearer realm="kandev-mcp", error="invalid_token"' : 'Bearer realm="kandev-mcp"';
    return jsonRpcError(res, 401, JSONRPC_UNAUTHORIZED, `Unauthorized: ${auth.message}`, { 'www-authenticate': challenge });
  }
  // Stateless: no standalone SSE stream (GET) and no session to delete (DELETE).
  if (req.method !== 'POST') return jsonRpcError(res, 405, JSONRPC_SERVER_ERROR, 'Method not allowed.', { allow: 'POST' });
  const read = await readJsonBody(req, res);
  if (!read) return;
  const parsedBody = read.body;

  // every POST carrying a request counts against its token's rate (ADR 0065); one carrying
  // only notifications (a cancel) or responses does not, so a flood never holds back a cancel.
  if (opts.rateLimit && carriesRequest(parsedBody)) {
    const refused = await opts.rateLimit(auth.token);
    if (refused) return rateLimitedAnswer(res, refused);
  }

  const scope: Omit<CallScope, 'signal'> = {
    nc: opts.nc,
    log,
    caller: auth.claims,
    callerToken: auth.token,
    requestId: first(req.headers[KandevHeaders.requestId]) || first(req.headers['x-request-id']) || randomUUID(),
    requestTimeoutMs: opts.requestTimeoutMs,
    // The HTTP server span's context (serveMcp runs inside it): the parent of every tool span.
    trace: context.active(),
  };
  // A client that goes away before its answer (a closed connection) no longer waits for it.
  const connection = new AbortController();
  // Each call can be cancelled by its caller from any replica, by the connection closing, and by the SDK (its transport closing).
  const run: RunTool = async (tool, name, args, id, signal) => {
    const call = inFlight.start(auth.token, id, AbortSignal.any([connection.signal, signal]));
    try {
      return await callTool(tool, name, args, { ...scope, signal: call.signal });
    } finally {
      call.end();
    }
  };
  const server = serverFor(auth.claims.mode, run, (id) => inFlight.cancel(auth.token, id));
  server.onerror = (err) => log.debug({ err }, 'mcp request refused by the transport');
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => {
    if (!res.writableFinished) connection.abort(new Error('client connection closed'));
    // Closing ends the per-POST server and transport; nothing is waiting on it, so a failure is only logged.
    server.close().catch((err: unknown) => log.debug({ err }, 'mcp server close failed'));
  });
  await connect(server, transport);
  await transport.handleRequest(req, res, parsedBody);
}

/**
 * MCP Streamable HTTP at `/mcp`, stateless (no session id), answering with JSON (no SSE needed by
 * simple clients). In front of the SDK, ours: Origin/Host (403), the bearer token and its
 * execution (401 / 503), 405 for anything but POST (the SDK's stateless transport would open an SSE
 * stream on GET), the charset (415), the body read and checked here (413 over 4 MiB; 400 when not
 * UTF-8 or not JSON, which the SDK would decode with U+FFFD), then handed over as `parsedBody`.
 * The SDK transport applies its HTTP rules (406 / 415 answers, `mcp-protocol-version`, batches of
 * up to 100, one initialize per POST, 202 for notifications) and its `Server` dispatches; tool calls
 * run in tool-call.ts under this request's span. `notifications/cancelled` reaches the call it names
 * on whichever replica holds it (cancellation.ts). `/healthz` answers without a token.
 */
export async function startMcpHttp(opts: McpHttpOptions): Promise<McpHttp> {
  const { log } = opts;
  const verifySignature = agentTokenVerifier(opts.jwtSecret);
  // Signature and expiry (remembered per token), then whether its execution still lives.
  const verify = async (token: string) => {
    const claims = await verifySignature(token);
    await opts.liveness?.check(claims);
    return claims;
  };
  const inFlight = new CallCancellations(opts.nc, opts.instanceId, log);
  await inFlight.ready;
  let policy: OriginPolicy | undefined;
  const http = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (path === '/healthz' && (req.method === 'GET' || req.method === 'HEAD')) {
      return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    }
    if (path !== '/mcp') return void res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"code":"NOT_FOUND","message":"not found"}}');
    // DNS rebinding (SPEC ): before the token, the body or anything else is looked at.
    const refused = originRefusal(policy!, req.headers);
    if (refused) {
      log.info({ reason: refused, origin: req.headers.origin, host: req.headers.host }, 'mcp request rejected: forbidden');
      return jsonRpcError(res, 403, JSONRPC_SERVER_ERROR, `Forbidden: ${refused}`);
    }
    inRequestSpan(req, res, path, () =>
      serveMcp({ opts, verify, inFlight }, req, res).catch((err: unknown) => {
        log.error({ err }, 'mcp request failed');
        jsonRpcError(res, 500, ErrorCode.InternalError, 'Internal server error');
      }),
    );
  });

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(opts.port, opts.host, () => {
      http.off('error', reject);
      resolve();
    });
  });
  const { port } = http.address() as AddressInfo;
  policy = originPolicy({ allowedOrigins: opts.allowedOrigins, allowedHosts: opts.allowedHosts, bindHost: opts.host, port });
  const url = `http://${opts.host}:${port}/mcp`;

  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      }),
  };
}
