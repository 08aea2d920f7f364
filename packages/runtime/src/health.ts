import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { registry } from './metrics.js';
import { stallReport } from './stalls.js';

export type ReadinessCheck = () => Promise<boolean>;

/** /healthz (process up), /readyz (every check passes), /metrics (Prometheus), /debug/stalls (stalls.ts). */
export async function startHealthServer(opts: {
  host: string;
  port: number;
  ready: ReadinessCheck;
  details?: () => Record<string, unknown>;
}): Promise<{ server: Server; url: string }> {
  const server = createServer(async (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    if (path === '/readyz') {
      const ok = await opts.ready().catch(() => false);
      const details = opts.details?.() ?? {};
      const body = { status: ok ? 'ready' : 'not_ready', ...(Object.keys(details).length > 0 ? { details } : {}) };
      return void res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    }
    if (path === '/metrics') {
      res.writeHead(200, { 'content-type': registry.contentType });
      return void res.end(await registry.metrics());
    }
    if (path === '/debug/stalls') {
      // The stall recorder's rings since `?since=<epoch ms>` (stalls.ts): loop delay, GC, background work.
      const since = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('since') ?? 0);
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(stallReport(since)));
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const addr = server.address() as AddressInfo;
  return { server, url: `http://${opts.host}:${addr.port}` };
}
