import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { exportsSpans } from '../src/resource.js';

/**
 * The OTel SDK environment specification's variables, each doing what the specification says:
 * a child process starts tracing from its environment as a service does, makes one span and shuts
 * down, against a local OTLP receiver over HTTP and one over gRPC. The process has exited (and
 * flushed) before anything is asserted, so "nothing arrived" is a fact, not a wait.
 */
describe('exportsSpans (whether the SDK is loaded at all)', () => {
  it.each([
    [{}, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, true],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' }, true],
    [{ OTEL_TRACES_EXPORTER: 'otlp' }, true],
    [{ OTEL_TRACES_EXPORTER: 'console' }, true],
    [{ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, false],
    [{ OTEL_TRACES_EXPORTER: 'none,otlp' }, true],
    [{ OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, false],
    [{ OTEL_SDK_DISABLED: 'TRUE', OTEL_TRACES_EXPORTER: 'otlp' }, false],
    [{ OTEL_SDK_DISABLED: 'false', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, true],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }, false],
  ])('%j → %s', (env, expected) => {
    expect(exportsSpans(env)).toBe(expected);
  });
});

interface Received {
  path: string;
  contentType: string;
  body: Buffer;
}
const http: Received[] = [];
const grpcCalls: Buffer[] = [];
let httpServer: Server;
let grpcServer: grpc.Server;
let httpUrl: string;
let grpcUrl: string;

const raw = (b: Buffer) => b;
beforeAll(async () => {
  httpServer = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      http.push({ path: req.url ?? '', contentType: String(req.headers['content-type'] ?? ''), body: Buffer.concat(chunks) });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  httpServer.listen(0, '127.0.0.1');
  await once(httpServer, 'listening');
  httpUrl = `http://127.0.0.1:${(httpServer.address() as AddressInfo).port}`;

  // The collector's trace service, with messages kept as bytes (an empty response is a valid
  // ExportTraceServiceResponse): no .proto files needed to see what arrived.
  grpcServer = new grpc.Server();
  grpcServer.addService(
    {
      Export: {
        path: '/opentelemetry.proto.collector.trace.v1.TraceService/Export',
        requestStream: false,
        responseStream: false,
        requestSerialize: raw,
        requestDeserialize: raw,
        responseSerialize: raw,
        responseDeserialize: raw,
      },
    },
    {
      Export: (call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) => {
        grpcCalls.push(call.request);
        done(null, Buffer.alloc(0));
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    grpcServer.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  grpcUrl = `http://127.0.0.1:${port}`;
});
afterAll(async () => {
  httpServer?.close();
  await new Promise<void>((r) => (grpcServer ? grpcServer.tryShutdown(() => r()) : r()));
});
beforeEach(() => {
  http.length = 0;
  grpcCalls.length = 0;
});

const fixture = fileURLToPath(new URL('./fixtures/export-span.mjs', import.meta.url));
/** Runs the fixture with exactly these OTEL_* variables (none inherited from this process). */
async function exportOneSpan(otel: Record<string, string>): Promise<void> {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_')));
  await promisify(execFile)(process.execPath, [fixture], { env: { ...inherited, OTEL_BSP_SCHEDULE_DELAY: '50', ...otel }, timeout: 60_000 });
}
const carries = (body: Buffer, text: string) => body.includes(Buffer.from(text));

describe('each standard variable, against local OTLP receivers', () => {
  it('OTEL_TRACES_EXPORTER=otlp with OTEL_EXPORTER_OTLP_ENDPOINT: http/protobuf (the default protocol) to <endpoint>/v1/traces', async () => {
    await exportOneSpan({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: httpUrl });
    expect(http.map((r) => [r.path, r.contentType])).toEqual([['/v1/traces', 'application/x-protobuf']]);
    expect(carries(http[0]!.body, 'otel-env-span')).toBe(true);
    expect(carries(http[0]!.body, 'otel-env-test')).toBe(true);
  });

  it('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT alone: used as it is, path included', async () => {
    await exportOneSpan({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${httpUrl}/custom/traces` });
    expect(http.map((r) => r.path)).toEqual(['/custom/traces']);
  });

  it('OTEL_EXPORTER_OTLP_PROTOCOL=http/json: JSON, with OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES in the resource', async () => {
    await exportOneSpan({
      OTEL_EXPORTER_OTLP_ENDPOINT: httpUrl,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'renamed-by-env',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=otel-env',
    });
    expect(http.map((r) => r.contentType)).toEqual(['application/json']);
    const body = JSON.parse(http[0]!.body.toString('utf8')) as {
      resourceSpans: Array<{
        resource: { attributes: Array<{ key: string; value: { stringValue?: string } }> };
        scopeSpans: Array<{ spans: Array<{ name: string }> }>;
      }>;
    };
    const attrs = Object.fromEntries(body.resourceSpans[0]!.resource.attributes.map((a) => [a.key, a.value.stringValue]));
    expect(attrs).toMatchObject({ 'service.name': 'renamed-by-env', 'deployment.environment.name': 'otel-env' });
    // The resource detectors' attributes (OTEL_NODE_RESOURCE_DETECTORS' default: env, process, host).
    const keys = body.resourceSpans[0]!.resource.attributes.map((a) => a.key);
    expect(keys).toEqual(expect.arrayContaining(['host.name', 'process.pid']));
    expect(body.resourceSpans[0]!.scopeSpans.flatMap((s) => s.spans.map((x) => x.name))).toContain('otel-env-span');
  });

  it('OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the collector trace service over gRPC, nothing over HTTP', async () => {
    await exportOneSpan({ OTEL_EXPORTER_OTLP_ENDPOINT: grpcUrl, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' });
    expect(grpcCalls).toHaveLength(1);
    expect(carries(grpcCalls[0]!, 'otel-env-span')).toBe(true);
    expect(http).toEqual([]);
  });

  it('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc wins over OTEL_EXPORTER_OTLP_PROTOCOL', async () => {
    await exportOneSpan({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: grpcUrl, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' });
    expect(grpcCalls).toHaveLength(1);
  });

  it.each([
    ['OTEL_SDK_DISABLED=true', { OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'otlp' }],
    ['OTEL_TRACES_EXPORTER=none', { OTEL_TRACES_EXPORTER: 'none' }],
  ])('%s: nothing is exported, though an endpoint is set', async (_name, otel) => {
    await exportOneSpan({ ...otel, OTEL_EXPORTER_OTLP_ENDPOINT: httpUrl });
    expect(http).toEqual([]);
  });
});
