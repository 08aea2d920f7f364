import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { stopChild } from '@kandev/runtime/dev/nats-server';

/**
 * Start the MCP floor server (src/fixtures/sdk-noop-server.ts: the SDK's own stateless Streamable
 * HTTP server with a no-op tool) as its own process; resolves with its URL and a stop function.
 */
export async function startSdkNoopServer(opts: { sse?: boolean } = {}): Promise<{ url: string; stop(): Promise<void> }> {
  const entry = fileURLToPath(new URL('./fixtures/sdk-noop-server.js', import.meta.url));
  const child = spawn(process.execPath, [entry], { env: { ...process.env, BENCH_SDK_SSE: opts.sse ? '1' : '0' }, stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('sdk-noop-server did not start')), 15_000);
    createInterface({ input: child.stdout! }).once('line', (line) => {
      clearTimeout(timer);
      resolve((JSON.parse(line) as { url: string }).url);
    });
    child.once('exit', (code) => reject(new Error(`sdk-noop-server exited with ${code}`)));
  });
  return { url, stop: () => stopChild(child) };
}
