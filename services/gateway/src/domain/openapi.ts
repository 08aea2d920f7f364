import { ErrorBody, ErrorCode, httpStatusOf } from '@kandev/contracts';
import { z } from 'zod';

/*
 * The OpenAPI 3.1 document of the gateway's HTTP API (SPEC R-12.3, ADR 0059), generated from the
 * contracts: every schema here is zod 4's own JSON Schema (draft 2020-12, OpenAPI 3.1's dialect) of
 * the endpoint a route forwards to, minus what the gateway fills in itself (the actor, path ids).
 * Pure: routes/openapi.ts feeds it the route tables and serves the result.
 */

export type JsonSchema = Record<string, unknown>;

export interface RouteDoc {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** Fastify's template: `/tasks/:id`, `/ui/*`. */
  url: string;
  summary: string;
  /** Needs `Authorization: Bearer <operator token>`. */
  auth: boolean;
  /** Path parameters (each a UUID unless named in `pathText`). */
  pathParams?: string[];
  /** The JSON body: the contract's request minus the fields the gateway sets. */
  body?: { schema: z.ZodType; omit: readonly string[] };
  /** Query parameters: the contract request's properties minus the fields the gateway sets, plus extra ones. */
  query?: { schema: z.ZodType; omit: readonly string[]; extra?: Record<string, { schema: JsonSchema; description: string }> };
  /** Extra query parameters of a route without a contract request (`/ws`). */
  queryParams?: Record<string, { schema: JsonSchema; description: string }>;
  headers?: Array<{ name: string; description: string; schema: JsonSchema }>;
  /** Success responses: status → the contract's result (JSON), a JSON Schema, or a non-JSON body. */
  responses: Record<string, { description: string; schema?: z.ZodType | JsonSchema; contentType?: string }>;
  /** Error codes this route can answer besides the ones every route can (BAD_REQUEST, INTERNAL_ERROR). */
  errors?: readonly ErrorCode[];
}

/** Codes an authenticated API route can answer (SPEC §5). */
export const API_ERRORS: readonly ErrorCode[] = ErrorCode.options.filter((c) => c !== 'UNKNOWN_ACTION');
/** Codes with a response of their own in components (VALIDATION_ERROR and UNKNOWN_ACTION share BAD_REQUEST's 400). */
const RESPONSE_CODES: readonly ErrorCode[] = ErrorCode.options.filter((c) => c !== 'VALIDATION_ERROR' && c !== 'UNKNOWN_ACTION');

const isZod = (s: unknown): s is z.ZodType => s instanceof z.ZodType;

/** zod → JSON Schema as a request (input: defaults optional) or a response (output). */
export function jsonSchemaOf(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const out = z.toJSONSchema(schema, { io, target: 'draft-2020-12', unrepresentable: 'any' }) as JsonSchema;
  delete out.$schema;
  return out;
}

/** The schema without the named properties (in every branch of a top-level union), for what the gateway fills in. */
export function withoutFields(schema: JsonSchema, omit: readonly string[]): JsonSchema {
  const out: JsonSchema = { ...schema };
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    if (Array.isArray(out[key])) out[key] = (out[key] as JsonSchema[]).map((b) => withoutFields(b, omit));
  }
  if (out.properties && typeof out.properties === 'object') {
    const props = { ...(out.properties as Record<string, JsonSchema>) };
    for (const f of omit) delete props[f];
    out.properties = props;
  }
  if (Array.isArray(out.required)) {
    const req = (out.required as string[]).filter((r) => !omit.includes(r));
    if (req.length) out.required = req;
    else delete out.required;
  }
  return out;
}

const toOpenApiPath = (url: string): string => url.replace(/:([A-Za-z_]+)/g, '{$1}').replace(/\*$/, '{path}');

/** Does the schema require anything (a body may be left out when it does not)? */
const requiresSomething = (s: JsonSchema): boolean =>
  (Array.isArray(s.required) && s.required.length > 0) ||
  (['anyOf', 'oneOf'] as const).some((k) => Array.isArray(s[k]) && (s[k] as JsonSchema[]).every(requiresSomething));

const UUID_SCHEMA: JsonSchema = { type: 'string', format: 'uuid' };

function operationOf(r: RouteDoc): Record<string, unknown> {
  const parameters: unknown[] = [];
  for (const p of r.pathParams ?? []) parameters.push({ name: p, in: 'path', required: true, schema: p === 'path' ? { type: 'string' } : UUID_SCHEMA });
  if (r.query) {
    const s = withoutFields(jsonSchemaOf(r.query.schema, 'input'), r.query.omit);
    const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
    for (const [name, schema] of Object.entries((s.properties ?? {}) as Record<string, JsonSchema>)) {
      const array = schema.type === 'array';
      parameters.push({ name, in: 'query', required: required.has(name), schema, ...(array ? { style: 'form', explode: true } : {}) });
    }
    for (const [name, p] of Object.entries(r.query.extra ?? {}))
      parameters.push({ name, in: 'query', required: false, schema: p.schema, description: p.description });
  }
  for (const [name, p] of Object.entries(r.queryParams ?? {}))
    parameters.push({ name, in: 'query', required: false, schema: p.schema, description: p.description });
  for (const h of r.headers ?? []) parameters.push({ name: h.name, in: 'header', required: false, schema: h.schema, description: h.description });

  const responses: Record<string, unknown> = {};
  for (const [status, res] of Object.entries(r.responses)) {
    if (!res.schema && !res.contentType) {
      responses[status] = { description: res.description };
      continue;
    }
    const schema = res.schema === undefined ? { type: 'string' } : isZod(res.schema) ? jsonSchemaOf(res.schema, 'output') : res.schema;
    responses[status] = { description: res.description, content: { [res.contentType ?? 'application/json']: { schema } } };
  }
  const codes = new Set<ErrorCode>(['BAD_REQUEST', 'INTERNAL_ERROR', ...(r.auth ? ['UNAUTHORIZED' as const] : []), ...(r.errors ?? [])]);
  for (const code of codes) {
    const status = String(httpStatusOf(code));
    if (responses[status]) continue;
    responses[status] = { $ref: `#/components/responses/${code === 'VALIDATION_ERROR' || code === 'UNKNOWN_ACTION' ? 'BAD_REQUEST' : code}` };
  }

  const op: Record<string, unknown> = {
    operationId: `${r.method.toLowerCase()}${toOpenApiPath(r.url)
      .replace(/[{}]/g, '')
      .replace(/[^A-Za-z0-9]+(.)?/g, (_m, c?: string) => (c ? c.toUpperCase() : ''))}`,
    summary: r.summary,
    ...(parameters.length ? { parameters } : {}),
    responses,
    security: r.auth ? [{ operatorToken: [] }] : [],
  };
  if (r.body) {
    const schema = withoutFields(jsonSchemaOf(r.body.schema, 'input'), r.body.omit);
    op.requestBody = { required: requiresSomething(schema), content: { 'application/json': { schema } } };
  }
  return op;
}

/** The whole document for these routes. */
export function openApiDocument(routes: readonly RouteDoc[], info: { version: string }): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const path = toOpenApiPath(r.url);
    paths[path] ??= {};
    paths[path][r.method.toLowerCase()] = operationOf(r);
  }
  const errorSchema = jsonSchemaOf(z.object({ error: ErrorBody }), 'output');
  const errorResponses: Record<string, unknown> = {};
  for (const code of RESPONSE_CODES) {
    errorResponses[code] = {
      description: `${code} (HTTP ${httpStatusOf(code)})${code === 'BAD_REQUEST' ? ', or VALIDATION_ERROR / UNKNOWN_ACTION' : ''}`,
      content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
    };
  }
  return {
    openapi: '3.1.0',
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    info: {
      title: 'Kandev control plane: gateway HTTP API',
      version: info.version,
      description:
        'Generated from the zod contracts of packages/contracts (SPEC R-12.3). Errors are `{"error": {"code", "message", "details"?}}` with the status of SPEC §5. The WebSocket `/ws` is listed for its upgrade only; its frames are described in INTERFACES.md.',
    },
    paths,
    components: {
      schemas: { Error: errorSchema },
      responses: errorResponses,
      securitySchemes: {
        operatorToken: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An operator token (npm run token -- operator).' },
      },
    },
  };
}
