import { Inbox, OrchPermission, OrchRead, WsTicket } from '@kandev/contracts';
import { packageVersion } from '@kandev/runtime';
import type { FastifyInstance } from 'fastify';
import { API_ERRORS, openApiDocument, type RouteDoc } from '../domain/openapi.js';
import { API_ROUTES } from './api.js';
import { READ_ROUTES } from './read.js';

/*
 * GET /openapi.json (SPEC, ADR 0059): the document is built from the same route tables that
 * register the routes (API_ROUTES, READ_ROUTES) and the contracts they forward to, plus the few
 * routes registered by hand, described here. services/gateway/test/openapi.test.ts fails when a
 * route registered in Fastify is missing from it.
 */

const words = (url: string) => url.replace(/^\//, '').replace(/\/:id/g, ' (by id)').replace(/\//g, ' ');

/** Every route the gateway registers, described; `/ui` has a route of its own only when no console is served. */
export function routeDocs(opts: { consoleServed: boolean }): RouteDoc[] {
  const docs: RouteDoc[] = [];
  for (const r of API_ROUTES) {
    const omit = ['actor', ...(r.idField ? [r.idField] : []), ...Object.values(r.params ?? {})];
    const statuses = typeof r.status === 'function' ? ['201', '200'] : [String(r.status)];
    const responses: RouteDoc['responses'] = {};
    for (const s of statuses)
      responses[s] =
        s === '204'
          ? { description: 'done' }
          : {
              description: typeof r.status === 'function' && s === '200' ? 'the first answer again (a replayed idempotent request)' : 'ok',
              schema: r.endpoint.result,
            };
    docs.push({
      method: r.method,
      url: r.url,
      summary: `${r.method} ${words(r.url)} (${r.endpoint.name})`,
      auth: true,
      pathParams: [...(r.url.includes(':id') ? ['id'] : []), ...Object.keys(r.params ?? {})],
      ...(r.body ? { body: { schema: r.endpoint.request, omit } } : {}),
      ...(r.idempotencyHeader
        ? {
            headers: [
              {
                name: 'Idempotency-Key',
                description: 'A retry with the same key answers the first result and acts once (B-7); UTF-8, as the body field idempotency_key.',
                schema: { type: 'string', minLength: 1 },
              },
            ],
          }
        : {}),
      responses,
      errors: API_ERRORS,
    });
  }
  for (const r of READ_ROUTES) {
    const omit = ['actor', ...(r.idField ? [r.idField] : [])];
    docs.push({
      method: 'GET',
      url: r.url,
      summary: `GET ${words(r.url)} (${r.endpoint.name})`,
      auth: true,
      ...(r.url.includes(':id') ? { pathParams: ['id'] } : {}),
      query: {
        schema: r.endpoint.request,
        omit,
        ...(r.endpoint === OrchRead.sessionMessages
          ? { extra: { cursor: { schema: { type: 'integer', minimum: 0 }, description: 'the next_cursor of the previous page (same as after_seq)' } } }
          : {}),
      },
      responses: { '200': { description: 'ok', schema: r.url === '/inbox' ? Inbox : r.endpoint.result } },
      errors: API_ERRORS,
    });
  }
  docs.push(
    {
      method: 'GET',
      url: '/tasks/:id/permissions',
      summary: "the task's permission requests, pending first (R-8.3)",
      auth: true,
      pathParams: ['id'],
      responses: { '200': { description: 'ok', schema: OrchPermission.ofTask.result } },
      errors: API_ERRORS,
    },
    {
      method: 'POST',
      url: '/permissions/:id/respond',
      summary: 'answer a permission request: {option_id} or {cancelled: true} (R-8.3)',
      auth: true,
      pathParams: ['id'],
      body: { schema: OrchPermission.respond.request, omit: ['actor', 'permission_request_id'] },
      responses: { '200': { description: 'the request, closed', schema: OrchPermission.respond.result } },
      errors: API_ERRORS,
    },
    {
      method: 'POST',
      url: '/ws/tickets',
      summary: 'a single-use ticket for /ws?ticket=, valid 30 s, bound to the token (R-12.4, ADR 0058)',
      auth: true,
      responses: { '200': { description: 'the ticket', schema: WsTicket } },
      errors: ['UNAUTHORIZED', 'UNAVAILABLE'],
    },
    {
      method: 'GET',
      url: '/ws',
      summary:
        'the WebSocket (upgrade only; frames in INTERFACES.md). Authenticate with Authorization: Bearer, ?ticket= (single use, from POST /ws/tickets) or ?token= (discouraged: a long-lived token in a URL)',
      auth: true,
      queryParams: {
        ticket: { schema: { type: 'string' }, description: 'a ticket from POST /ws/tickets (single use, 30 s)' },
        token: { schema: { type: 'string' }, description: 'an operator token (discouraged: it lands in access logs)' },
      },
      responses: { '101': { description: 'switching protocols' } },
      errors: ['UNAUTHORIZED'],
    },
    {
      method: 'GET',
      url: '/openapi.json',
      summary: 'this document (no token needed)',
      auth: false,
      responses: { '200': { description: 'OpenAPI 3.1', schema: { type: 'object' } } },
    },
    {
      method: 'GET',
      url: '/healthz',
      summary: 'liveness (no token)',
      auth: false,
      responses: { '200': { description: 'up', schema: { type: 'object', properties: { status: { const: 'ok' } } } } },
    },
    {
      method: 'GET',
      url: '/readyz',
      summary: 'readiness: every service answers its ping (no token)',
      auth: false,
      responses: { '200': { description: 'ready', schema: { type: 'object' } }, '503': { description: 'not ready', schema: { type: 'object' } } },
    },
    {
      method: 'GET',
      url: '/metrics',
      summary: 'Prometheus metrics (no token)',
      auth: false,
      responses: { '200': { description: 'metrics', contentType: 'text/plain' } },
    },
    { method: 'GET', url: '/', summary: 'redirects to the console (/ui/)', auth: false, responses: { '302': { description: 'to /ui/' } } },
    {
      method: 'GET',
      url: '/ui/*',
      summary: "the operator console's static files (no token: the console asks for one)",
      auth: false,
      pathParams: ['path'],
      responses: { '200': { description: 'a file', contentType: 'text/html' } },
      errors: ['NOT_FOUND'],
    },
  );
  if (!opts.consoleServed)
    docs.push({ method: 'GET', url: '/ui', summary: 'the console, not built here (404)', auth: false, responses: {}, errors: ['NOT_FOUND'] });
  return docs;
}

export function registerOpenApiRoute(app: FastifyInstance, opts: { consoleServed: boolean }): void {
  let cached: string | null = null;
  app.get('/openapi.json', async (_req, reply) => {
    // Built once: the contracts do not change while the process runs.
    cached ??= JSON.stringify(openApiDocument(routeDocs(opts), { version: packageVersion(import.meta.url) ?? '0.0.0' }));
    return reply.header('content-type', 'application/json; charset=utf-8').send(cached);
  });
}
