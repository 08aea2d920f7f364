import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentToken, Harness, uuid } from './harness.js';

/**
 * MCP conformance, server side: the official suite, `@modelcontextprotocol/conformance`, run as
 * published against the mcp service (`conformance server --url … --expected-failures …`).
 * conformance-baseline.yml lists the scenarios a tools-only, stateless server does not pass, each
 * with why; the suite itself fails the run on an unexpected failure and on a stale baseline entry
 * (a listed scenario that now passes). Its client sends no bearer token, and every /mcp request
 * here needs one, so the suite talks to a loopback proxy that adds the Authorization header of an
 * agent token and passes everything else (Host, Origin, the body, the stream) through unchanged.
 */
const require = createRequire(import.meta.url);
const SUITE_BIN = join(require.resolve('@modelcontextprotocol/conformance/package.json'), '..', 'dist', 'index.js');
const BASELINE = fileURLToPath(new URL('./conformance-baseline.yml', import.meta.url));

let h: Harness;
let proxy: Server;
let proxyUrl: string;

beforeAll(async () => {
  // The proxy's port first: it is the origin the suite's client sends, which a deployment behind a
  // proxy lists in MCP_ALLOWED_ORIGINS (the dns-rebinding scenario needs it accepted, and evil.example.com refused).
  let target: URL | undefined;
  proxy = createServer((req, res) => {
    const upstream = httpRequest(
      { host: target!.hostname, port: target!.port, method: req.method, path: req.url, headers: { ...req.headers, authorization: `Bearer ${token}` } },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  proxy.listen(0, '127.0.0.1');
  await once(proxy, 'listening');
  const port = (proxy.address() as AddressInfo).port;
  h = await Harness.start({ MCP_ALLOWED_ORIGINS: `http://127.0.0.1:${port},http://localhost:${port}` });
  const token = await agentToken({ task_id: uuid(), mode: 'task' });
  target = new URL(h.url);
  proxyUrl = `http://127.0.0.1:${port}${target.pathname}`;
});
afterAll(async () => {
  proxy?.close();
  await h?.stop();
});

/** Runs the suite's CLI to its end; resolves with its exit code and output. */
function runSuite(args: string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [SUITE_BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    for (const s of [child.stdout, child.stderr]) s.on('data', (d: Buffer) => (output += d.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

describe('@modelcontextprotocol/conformance, server mode', () => {
  it('passes every server scenario of the active suite but the baseline, and the baseline is not stale', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mcp-conformance-'));
    try {
      const run = await runSuite(['server', '--url', proxyUrl, '--expected-failures', BASELINE, '-o', out]);
      expect(run.code, run.output).toBe(0);
      // The suite wrote a result per scenario it ran: the ones this server must pass did pass.
      const ran = readdirSync(out, { recursive: true }).filter((f) => String(f).endsWith('checks.json'));
      expect(ran.length, run.output).toBeGreaterThan(0);
      const checks = ran.flatMap((f) => JSON.parse(readFileSync(join(out, String(f)), 'utf8')) as Array<{ status: string }>);
      expect(
        checks.some((c) => c.status === 'SUCCESS'),
        run.output,
      ).toBe(true);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
