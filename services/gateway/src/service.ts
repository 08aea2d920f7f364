import { SERVICE_KEYS, type ServiceDefinition, packageVersion } from '@kandev/runtime';
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GatewayEnv } from './env.js';
import { buildGatewayServer } from './server.js';

// The console's Vite build output (services/gateway/console → dist/console, scripts/build-console.mjs).
// `../dist/console` resolves to the same directory from dist/service.js and from src/service.ts (tests).
const DEFAULT_CONSOLE_DIR = fileURLToPath(new URL('../dist/console', import.meta.url));

/** The operator edge: HTTP API, /ws and the console's static files. */
export const gatewayService: ServiceDefinition<typeof GatewayEnv> = {
  name: 'gateway',
  version: packageVersion(import.meta.url),
  env: GatewayEnv,
  publishesEvents: false,
  // Operator tokens only (ADR 0020): it can neither mint nor accept agent tokens.
  keys: SERVICE_KEYS.gateway,
  async start(rt) {
    const consoleDir = resolveConsoleDir(rt.env.CONSOLE_DIR);
    if (rt.env.CONSOLE_DIR && !consoleDir) rt.log.warn({ console_dir: rt.env.CONSOLE_DIR }, 'CONSOLE_DIR is not a directory; /ui/ answers 404');
    let stopping = false;
    const { app } = await buildGatewayServer({
      nc: rt.nc,
      log: rt.log,
      jwtSecret: rt.key('operator'),
      timeoutMs: rt.env.GATEWAY_REQUEST_TIMEOUT_MS,
      consoleDir,
      isStopping: () => stopping,
      operatorRate: { rate: rt.env.KANDEV_OPERATOR_RATE, burst: rt.env.KANDEV_OPERATOR_BURST, replicas: rt.env.GATEWAY_REPLICAS },
    });
    await app.listen({ host: rt.env.GATEWAY_HOST, port: rt.env.GATEWAY_PORT });
    rt.onStop(async () => {
      stopping = true;
      // Closes every socket (1001) and the live-event subscription, then waits for in-flight requests.
      await app.close();
    });
    const address = app.server.address();
    const port = typeof address === 'object' && address ? address.port : rt.env.GATEWAY_PORT;
    const http = `http://${urlHost(rt.env.GATEWAY_HOST)}:${port}`;
    return { urls: { http, ws: `${http.replace(/^http/, 'ws')}/ws` } };
  },
};

function resolveConsoleDir(configured: string | undefined): string | null {
  const dir = configured ? resolve(configured) : DEFAULT_CONSOLE_DIR;
  return existsSync(dir) && statSync(dir).isDirectory() ? dir : null;
}

/** A host clients can dial: wildcard binds are reached on loopback, IPv6 literals need brackets. */
function urlHost(host: string): string {
  if (host === '0.0.0.0' || host === '::') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}
