import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectNats, createLogger, type NatsConnection } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { buildGatewayServer, type GatewayServer } from '../src/server.js';
import { SECRET } from './helpers.js';

/**
 * SPEC: GET /openapi.json is an OpenAPI 3.1 document generated from the contracts. Every
 * route registered in Fastify is in it (with its method), every schema in it compiles as JSON
 * Schema 2020-12, and every example request of the README validates against it.
 */
let nats: TestNats;
let nc: NatsConnection;
let server: GatewayServer;
let doc: any;

beforeAll(async () => {
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: 'gateway-openapi-test' });
  server = await buildGatewayServer({
    nc,
    log: createLogger('openapi-test', 'silent'),
    jwtSecret: SECRET,
    timeoutMs: 5_000,
    consoleDir: null,
    isStopping: () => false,
  });
  const res = await server.app.inject({ method: 'GET', url: '/openapi.json' });
  expect(res.statusCode).toBe(200);
  doc = res.json();
});
afterAll(async () => {
  await server?.app.close();
  await nc?.close();
  await nats?.stop();
});

const toOpenApiPath = (url: string) => url.replace(/:([A-Za-z_]+)/g, '{$1}').replace(/\*$/, '{path}');
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });

describe('GET /openapi.json', () => {
  it('needs no token and is OpenAPI 3.1', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.jsonSchemaDialect).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(Object.keys(doc.paths).length).toBeGreaterThan(30);
  });

  it('has every route registered in Fastify, with its method (this test fails when a route is added without a description)', () => {
    const registered = server.routes.filter((r) => r.method !== 'HEAD' && r.method !== 'OPTIONS');
    expect(registered.length).toBeGreaterThan(30);
    const missing = registered.filter((r) => !doc.paths[toOpenApiPath(r.url)]?.[r.method.toLowerCase()]).map((r) => `${r.method} ${r.url}`);
    expect(missing).toEqual([]);
    // And nothing documented that is not served.
    const served = new Set(registered.map((r) => `${r.method.toLowerCase()} ${toOpenApiPath(r.url)}`));
    const extra = Object.entries(doc.paths)
      .flatMap(([p, ops]) => Object.keys(ops as object).map((m) => `${m} ${p}`))
      .filter((k) => !served.has(k));
    expect(extra).toEqual([]);
  });

  it('…also when the console is served (its static routes instead of the 404 ones)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kandev-console-'));
    writeFileSync(join(dir, 'index.html'), '<!doctype html>');
    const withConsole = await buildGatewayServer({
      nc,
      log: createLogger('openapi-test', 'silent'),
      jwtSecret: SECRET,
      timeoutMs: 5_000,
      consoleDir: dir,
      isStopping: () => false,
    });
    try {
      const d = (await withConsole.app.inject({ method: 'GET', url: '/openapi.json' })).json();
      const registered = withConsole.routes.filter((r) => r.method !== 'HEAD' && r.method !== 'OPTIONS');
      const served = new Set(registered.map((r) => `${r.method.toLowerCase()} ${toOpenApiPath(r.url)}`));
      const documented = Object.entries(d.paths).flatMap(([p, ops]) => Object.keys(ops as object).map((m) => `${m} ${p}`));
      expect(documented.sort()).toEqual([...served].sort());
      expect(served.has('get /ui/{path}')).toBe(true);
    } finally {
      await withConsole.app.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('describes request, response and error bodies from the contracts; every schema compiles', () => {
    const create = doc.paths['/tasks'].post;
    expect(create.requestBody.content['application/json'].schema.required).toEqual(expect.arrayContaining(['workspace_id', 'title']));
    // What the gateway fills in is not the caller's to send.
    expect(create.requestBody.content['application/json'].schema.properties.actor).toBeUndefined();
    expect(create.responses['201'].content['application/json'].schema.properties.id).toBeDefined();
    expect(create.responses['401']).toEqual({ $ref: '#/components/responses/UNAUTHORIZED' });
    expect(create.parameters.map((p: { name: string }) => p.name)).toContain('Idempotency-Key');
    const inbox = doc.paths['/inbox'].get;
    expect(inbox.parameters.find((p: { name: string }) => p.name === 'workspace_id')).toMatchObject({ in: 'query', required: true });
    expect(inbox.responses['200'].content['application/json'].schema.properties.items.items.properties.kind.enum).toEqual(['clarification', 'permission']);
    expect(doc.paths['/tasks/{id}/stop'].post.parameters).toEqual([expect.objectContaining({ name: 'id', in: 'path', required: true })]);
    expect(doc.components.schemas.Error.properties.error.properties.code.enum).toContain('VALIDATION_ERROR');
    let schemas = 0;
    const walk = (o: unknown): void => {
      if (!o || typeof o !== 'object') return;
      const rec = o as Record<string, unknown>;
      if (rec.schema && typeof rec.schema === 'object' && !('$ref' in (rec.schema as object))) {
        expect(() => ajv.compile(rec.schema as object)).not.toThrow();
        schemas++;
      }
      for (const v of Object.values(rec)) walk(v);
    };
    walk(doc.paths);
    expect(schemas).toBeGreaterThan(60);
  });
});

/** The README's first-session examples: `curl … [-X M] $G/path[?query] [-d 'json']`, variables filled with UUIDs. */
function readmeExamples(): Array<{ line: string; method: string; path: string; query: URLSearchParams; body: unknown }> {
  const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
  const block = /A first session[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
  const vars = new Map<string, string>();
  const fill = (s: string) =>
    s.replace(/\$\{?([A-Z]+)\}?/g, (_m, v: string) => {
      if (!vars.has(v)) vars.set(v, randomUUID());
      return vars.get(v)!;
    });
  const out = [];
  for (const line of block.split('\n').filter((l) => l.includes('curl '))) {
    const m = /curl -s (?:"\$\{H\[@\]\}" )?(?:-X (\w+) )?"?\$G(\/[^"\s]*)"?(?: -d (?:'([^']*)'|"((?:[^"\\]|\\.)*)"))?/.exec(line);
    expect(m, line).not.toBeNull();
    const [, method, url, single, double] = m!;
    const raw = single ?? (double !== undefined ? double.replace(/\\"/g, '"') : undefined);
    const [path, qs] = fill(url!).split('?');
    out.push({
      line,
      method: method ?? (raw !== undefined ? 'POST' : 'GET'),
      path: path!,
      query: new URLSearchParams(qs ?? ''),
      body: raw === undefined ? undefined : JSON.parse(fill(raw)),
    });
  }
  return out;
}

/** A query value as the parameter's schema types it (query strings are text on the wire). */
function typed(value: string, schema: any): unknown {
  const type = schema.type ?? schema.anyOf?.find((s: any) => s.type !== 'null')?.type;
  if (type === 'integer' || type === 'number') return Number(value);
  if (type === 'boolean') return value === 'true' ? true : value === 'false' ? false : value;
  if (type === 'array') return value.split(',');
  return value;
}

describe("the README's example requests validate against the document", () => {
  const examples = readmeExamples();
  it('finds the examples (this test can fail)', () => {
    expect(examples.length).toBeGreaterThanOrEqual(20);
    expect(examples.map((e) => `${e.method} ${e.path.replace(/[0-9a-f-]{36}/g, ':id')}`)).toEqual(
      expect.arrayContaining(['POST /workspaces', 'POST /tasks', 'GET /inbox', 'POST /ws/tickets', 'GET /openapi.json']),
    );
  });
  it.each(examples.map((e) => [e.line.trim().slice(0, 90), e] as const))('%s', (_n, e) => {
    const entry = Object.entries(doc.paths).find(([p]) => new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(e.path));
    expect(entry, `no path for ${e.path}`).toBeDefined();
    const op = (entry![1] as Record<string, any>)[e.method.toLowerCase()];
    expect(op, `${e.method} ${entry![0]} is not in the document`).toBeDefined();
    // Path parameters.
    const names = [...entry![0].matchAll(/\{([^}]+)\}/g)].map((x) => x[1]);
    const values = new RegExp(`^${entry![0].replace(/\{[^}]+\}/g, '([^/]+)')}$`).exec(e.path)!.slice(1);
    names.forEach((name, i) => {
      const p = op.parameters.find((x: any) => x.name === name && x.in === 'path');
      expect(p, `path parameter ${name}`).toBeDefined();
      expect(ajv.validate({ type: 'string', pattern: '^[0-9a-f-]{36}$', ...p.schema, format: undefined }, values[i]), `${name}=${values[i]}`).toBe(true);
    });
    // Query parameters: each known, each valid; required ones present.
    const params = (op.parameters ?? []).filter((x: any) => x.in === 'query');
    for (const [k, v] of e.query) {
      const p = params.find((x: any) => x.name === k);
      expect(p, `query parameter ${k}`).toBeDefined();
      expect(ajv.validate(p.schema, typed(v, p.schema)), `${k}=${v}: ${ajv.errorsText()}`).toBe(true);
    }
    for (const p of params.filter((x: any) => x.required)) expect(e.query.has(p.name), `required ${p.name}`).toBe(true);
    // Body.
    if (e.body === undefined) {
      expect(op.requestBody?.required ?? false, 'a body is required').toBe(false);
    } else {
      const schema = op.requestBody?.content['application/json'].schema;
      expect(schema, 'the route takes no body').toBeDefined();
      expect(ajv.validate(schema, e.body), ajv.errorsText()).toBe(true);
    }
  });
});
