import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { stopChild } from '@kandev/runtime/dev/nats-server';

/** Start a fixture (src/fixtures/<name>.ts) as its own process; resolves with the JSON of the first line it prints and a stop function. */
export async function startFixture<T>(name: string, env: Record<string, string>): Promise<{ ready: T; stop(): Promise<void> }> {
  const entry = fileURLToPath(new URL(`./fixtures/${name}.js`, import.meta.url));
  const child = spawn(process.execPath, [entry], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  const ready = await new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start`)), 15_000);
    createInterface({ input: child.stdout! }).once('line', (line) => {
      clearTimeout(timer);
      resolve(JSON.parse(line) as T);
    });
    child.once('exit', (code) => reject(new Error(`${name} exited with ${code}`)));
  });
  return { ready, stop: () => stopChild(child) };
}

/**
 * Start the MCP floor server (src/fixtures/sdk-noop-server.ts: the SDK's own stateless Streamable
 * HTTP server with a no-op tool) as its own process; resolves with its URL and a stop function.
 * With `relay`, it also has the design floor's `relay` tool (src/design-floor.ts).
 */
export async function startSdkNoopServer(
  opts: { sse?: boolean; relay?: { natsUrl: string; subject: string; login?: { user?: string; pass?: string } } } = {},
): Promise<{ url: string; stop(): Promise<void> }> {
  const relay: Record<string, string> = opts.relay
    ? {
        BENCH_RELAY_NATS_URL: opts.relay.natsUrl,
        BENCH_RELAY_SUBJECT: opts.relay.subject,
        ...(opts.relay.login?.user ? { BENCH_RELAY_NATS_USER: opts.relay.login.user, BENCH_RELAY_NATS_PASS: opts.relay.login.pass ?? '' } : {}),
      }
    : {};
  const { ready, stop } = await startFixture<{ url: string }>('sdk-noop-server', { BENCH_SDK_SSE: opts.sse ? '1' : '0', ...relay });
  return { url: ready.url, stop };
}
