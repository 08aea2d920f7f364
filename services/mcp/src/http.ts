import { Headers as KandevHeaders, isKandevError } from '@kandev/contracts';
import { bearer, context, propagation, verifyAgentToken, type AgentClaims, type Logger, type NatsConnection } from '@kandev/runtime';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createMcpServer } from './server.js';

export interface McpHttpOptions {
  host: string;
  port: number;
  jwtSecret: string;
  requestTimeoutMs: number;
  nc: NatsConnection;
  log: Logger;
}

export interface McpHttp {
  url: string;
  close(): Promise<void>;
}

/** JSON-RPC error codes the SDK's own HTTP layer uses for transport-level failures. */
const JSONRPC_UNAUTHORIZED = -32001;
const JSONRPC_SERVER_ERROR = -32000;
const JSONRPC_INTERNAL = -32603;

function jsonRpcError(res: ServerResponse, status: number, code: number, message: string, extraHeaders: Record<string, string> = {}): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { 'content-type': 'application/json', ...extraHeaders });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

async function authenticate(req: IncomingMessage, secret: string): Promise<{ ok: true; claims: AgentClaims; token: string } | { ok: false; message: string; presented: boolean }> {
  const token = bearer(req.headers.authorization);
  if (!token) return { ok: false, message: 'missing bearer token', presented: false };
  try {
    return { ok: true, claims: await verifyAgentToken(secret, token), token };
  } catch (e) {
    return { ok: false, message: isKandevError(e) ? e.message : 'invalid token', presented: true };
  }
}

/**
 * MCP Streamable HTTP at `/mcp`, stateless: every POST gets a fresh server and transport bound
 * to the caller its bearer token names, with JSON responses (no SSE needed by simple clients).
 * `/healthz` answers without a token.
 */
export async function startMcpHttp(opts: McpHttpOptions): Promise<McpHttp> {
  const { log } = opts;

  async function serveMcp(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const auth = await authenticate(req, opts.jwtSecret);
    if (!auth.ok) {
      log.info({ reason: auth.message, method: req.method }, 'mcp request rejected: unauthorized');
      const challenge = auth.presented ? 'Bearer realm="kandev-mcp", error="invalid_token"' : 'Bearer realm="kandev-mcp"';
      return jsonRpcError(res, 401, JSONRPC_UNAUTHORIZED, `Unauthorized: ${auth.message}`, { 'www-authenticate': challenge });
    }
    // Stateless: no standalone SSE stream (GET) and no session to delete (DELETE).
    if (req.method !== 'POST') return jsonRpcError(res, 405, JSONRPC_SERVER_ERROR, 'Method not allowed.', { allow: 'POST' });

    const requestIdHeader = req.headers[KandevHeaders.requestId] ?? req.headers['x-request-id'];
    const requestId = (Array.isArray(requestIdHeader) ? requestIdHeader[0] : requestIdHeader) || randomUUID();
    const server = createMcpServer({
      nc: opts.nc,
      log,
      caller: auth.claims,
      callerToken: auth.token,
      requestId,
      requestTimeoutMs: opts.requestTimeoutMs,
      trace: propagation.extract(context.active(), req.headers),
    });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void transport.close().catch(() => undefined);
      void server.close().catch(() => undefined);
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  }

  const http = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz' && (req.method === 'GET' || req.method === 'HEAD')) {
      return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    }
    if (path !== '/mcp') return void res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"code":"NOT_FOUND","message":"not found"}}');
    serveMcp(req, res).catch((err: unknown) => {
      log.error({ err }, 'mcp request failed');
      jsonRpcError(res, 500, JSONRPC_INTERNAL, 'Internal server error');
    });
  });

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(opts.port, opts.host, () => {
      http.off('error', reject);
      resolve();
    });
  });
  const { port } = http.address() as AddressInfo;
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
