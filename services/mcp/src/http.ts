/**
 * The MCP transport, hand-written: Streamable HTTP of the MCP specification revision 2025-11-25
 * (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#streamable-http), in
 * its stateless, JSON-answer form; older revisions the SDK lists (SUPPORTED_PROTOCOL_VERSIONS) are
 * accepted in `mcp-protocol-version`. Conformance: test/conformance.test.ts (the official suite
 * needs Node 22; the test mirrors its server scenarios on Node 20).
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
  propagation,
  SpanKind,
  trace,
  tracer,
  type AgentClaims,
  type Logger,
  type NatsConnection,
} from '@kandev/runtime';
import { ROOT_CONTEXT, SpanStatusCode } from '@opentelemetry/api';
import {
  ErrorCode,
  JSONRPCMessageSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCMessage,
  type JSONRPCRequest,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { originPolicy, originRefusal, type OriginPolicy } from './domain/origin.js';
import { CallCancellations } from './cancellation.js';
import type { ExecutionLiveness } from './execution-liveness.js';
import { answerRequest, type JsonRpcAnswer } from './protocol.js';
import type { CallScope } from './tool-call.js';

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
}

export interface McpHttp {
  url: string;
  close(): Promise<void>;
}

/** JSON-RPC error codes the SDK's own HTTP layer uses for transport-level failures. */
const JSONRPC_UNAUTHORIZED = -32001;
const JSONRPC_SERVER_ERROR = -32000;
/** The SDK transport's limits (server/requestBody.js): 4 MiB per POST, 100 messages per batch. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;
const MAX_BATCH = 100;

function jsonRpcError(res: ServerResponse, status: number, code: number, message: string, extraHeaders: Record<string, string> = {}): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { 'content-type': 'application/json', ...extraHeaders });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
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
/** `application/json`, with or without parameters (`; charset=utf-8`). */
const isJson = (contentType: string | undefined) => !!contentType && contentType.split(';', 1)[0]!.trim().toLowerCase() === 'application/json';
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

const isRequest = (m: JSONRPCMessage): m is JSONRPCRequest => 'method' in m && 'id' in m;

/** The request ids a `notifications/cancelled` in this POST names (MCP cancellation). */
function cancelledIds(messages: readonly JSONRPCMessage[]): RequestId[] {
  const ids: RequestId[] = [];
  for (const m of messages) {
    if (isRequest(m) || !('method' in m) || m.method !== 'notifications/cancelled') continue;
    const id = (m.params as { requestId?: unknown } | undefined)?.requestId;
    if (typeof id === 'string' || typeof id === 'number') ids.push(id);
  }
  return ids;
}

/**
 * MCP Streamable HTTP at `/mcp`, stateless (no session id), answering with JSON (no SSE needed by
 * simple clients). Each POST is authenticated, its JSON-RPC messages validated with the SDK's
 * schemas, and every request answered by `answerRequest` from tables built at start-up, for the
 * mode of the caller's token; notifications and client responses are accepted (202); the only one
 * with an effect is `notifications/cancelled`, which reaches the call it names on whichever replica
 * holds it (cancellation.ts). The HTTP rules are the SDK transport's (406 / 415 / 413 / 400
 * answers, `mcp-protocol-version` check, batches of up to 100). `/healthz` answers without a token.
 */
/** The one route of the MCP transport (http.route of its spans). */
const MCP_ROUTE = '/mcp';

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

  async function serveMcp(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const auth = await authenticate(req, verify);
    if (!auth.ok) {
      if (auth.unavailable) return jsonRpcError(res, 503, JSONRPC_SERVER_ERROR, `Service Unavailable: ${auth.message}`, { 'retry-after': '1' });
      log.info({ reason: auth.message, method: req.method }, 'mcp request rejected: unauthorized');
      const challenge = auth.presented ? 'Bearer realm="kandev-mcp", error="invalid_token"' : 'Bearer realm="kandev-mcp"';
      return jsonRpcError(res, 401, JSONRPC_UNAUTHORIZED, `Unauthorized: ${auth.message}`, { 'www-authenticate': challenge });
    }
    // Stateless: no standalone SSE stream (GET) and no session to delete (DELETE).
    if (req.method !== 'POST') return jsonRpcError(res, 405, JSONRPC_SERVER_ERROR, 'Method not allowed.', { allow: 'POST' });
    const accept = first(req.headers.accept) ?? '';
    if (!accept.includes('application/json') || !accept.includes('text/event-stream')) {
      return jsonRpcError(res, 406, JSONRPC_SERVER_ERROR, 'Not Acceptable: Client must accept both application/json and text/event-stream');
    }
    const contentType = first(req.headers['content-type']);
    if (!isJson(contentType)) return jsonRpcError(res, 415, JSONRPC_SERVER_ERROR, 'Unsupported Media Type: Content-Type must be application/json');
    if (!charsetIsUtf8(contentType!)) return jsonRpcError(res, 415, JSONRPC_SERVER_ERROR, 'Unsupported Media Type: the charset must be utf-8');

    const bytes = await readBody(req, MAX_BODY_BYTES);
    if (bytes === null) {
      // The rest of the body is never read: answer, then drop the connection.
      res.on('finish', () => req.destroy());
      return jsonRpcError(res, 413, JSONRPC_SERVER_ERROR, `Payload Too Large: Request body must not exceed ${MAX_BODY_BYTES} bytes`, { connection: 'close' });
    }
    let text: string;
    try {
      text = utf8.decode(bytes);
    } catch {
      return jsonRpcError(res, 400, ErrorCode.ParseError, 'Parse error: the body is not valid UTF-8');
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      return jsonRpcError(res, 400, ErrorCode.ParseError, 'Parse error: Invalid JSON');
    }
    const batch = Array.isArray(raw);
    const items: unknown[] = batch ? (raw as unknown[]) : [raw];
    if (items.length > MAX_BATCH) return jsonRpcError(res, 400, ErrorCode.InvalidRequest, `Invalid Request: Batch must not exceed ${MAX_BATCH} messages`);
    const messages: JSONRPCMessage[] = [];
    for (const item of items) {
      const m = JSONRPCMessageSchema.safeParse(item);
      if (!m.success) return jsonRpcError(res, 400, ErrorCode.ParseError, 'Parse error: Invalid JSON-RPC message');
      messages.push(m.data);
    }
    for (const id of cancelledIds(messages)) inFlight.cancel(auth.token, id);
    const requests = messages.filter(isRequest);
    const initializing = requests.some((r) => r.method === 'initialize');
    if (initializing && messages.length > 1)
      return jsonRpcError(res, 400, ErrorCode.InvalidRequest, 'Invalid Request: Only one initialization request is allowed');
    const version = first(req.headers['mcp-protocol-version']);
    if (!initializing && version !== undefined && !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) {
      return jsonRpcError(
        res,
        400,
        JSONRPC_SERVER_ERROR,
        `Bad Request: Unsupported protocol version: ${version} (supported versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`,
      );
    }
    // Notifications (initialized, cancelled, progress) and responses only: nothing to answer.
    if (requests.length === 0) return void res.writeHead(202).end();

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
    res.on('close', () => {
      if (!res.writableFinished) connection.abort(new Error('client connection closed'));
    });
    const answers: JsonRpcAnswer[] = await Promise.all(
      requests.map(async (r) => {
        const call = inFlight.start(auth.token, r.id, connection.signal);
        try {
          return await answerRequest(r, { ...scope, signal: call.signal });
        } finally {
          call.end();
        }
      }),
    );
    // As the SDK transport: one request (with or without notifications beside it) gets one object.
    const body = JSON.stringify(answers.length === 1 ? answers[0] : answers);
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  }

  const http = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
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
    // One HTTP server span per request to /mcp (`POST /mcp`), continuing the caller's trace; the
    // tool calls in its body are its children. Refusals before this point (origin) are not traced.
    const parent = req.headers.traceparent ? propagation.extract(ROOT_CONTEXT, req.headers) : ROOT_CONTEXT;
    const method = req.method ?? 'GET';
    const span = tracer().startSpan(httpServerSpanName(method, MCP_ROUTE), { kind: SpanKind.SERVER }, parent);
    if (span.isRecording()) span.setAttributes(httpServerAttributes(method, MCP_ROUTE, path));
    res.once('close', () => {
      span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, res.statusCode);
      if (res.statusCode >= 500) {
        span.setAttribute(ATTR_ERROR_TYPE, String(res.statusCode));
        span.setStatus({ code: SpanStatusCode.ERROR });
      }
      span.end();
    });
    void context.with(trace.setSpan(parent, span), () =>
      serveMcp(req, res).catch((err: unknown) => {
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
