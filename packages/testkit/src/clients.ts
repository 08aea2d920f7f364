import WebSocket from 'ws';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/**
 * The gateway's HTTP client lives with the `kandev` CLI (@kandev/cli), the one typed client of the
 * API; the test kit re-exports it so tests keep `ApiClient` (`call`, `get`, `post`, `ok`, `startSession`).
 */
export { ApiClient, ApiRefused } from '@kandev/cli';

export interface WsFrame {
  id?: string;
  type: 'response' | 'error' | 'notification';
  action: string;
  payload: any;
}

/** A /ws client with request/response correlation and a notification inbox. */
export class WsClient {
  private seq = 0;
  readonly notifications: WsFrame[] = [];
  private readonly waiters = new Map<string, { resolve: (f: WsFrame) => void; reject: (e: Error) => void }>();
  private readonly listeners = new Set<() => void>();
  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data) => {
      const frame = JSON.parse(String(data)) as WsFrame;
      if (frame.type === 'notification') {
        this.notifications.push(frame);
        this.listeners.forEach((l) => l());
      } else if (frame.id && this.waiters.has(frame.id)) {
        this.waiters.get(frame.id)!.resolve(frame);
        this.waiters.delete(frame.id);
      }
    });
    // A dropped connection is an error to every request still waiting (the caller is told, not left hanging).
    socket.on('close', () => {
      for (const w of this.waiters.values()) w.reject(new Error('connection closed before the answer'));
      this.waiters.clear();
    });
  }
  static connect(url: string, token: string): Promise<WsClient> {
    return new Promise((resolve, reject) => {
      const s = new WebSocket(`${url}?token=${encodeURIComponent(token)}`);
      s.once('open', () => resolve(new WsClient(s)));
      s.once('error', reject);
      s.once('unexpected-response', (_req, res) => reject(new Error(`ws upgrade refused: ${res.statusCode}`)));
    });
  }
  request(action: string, payload: unknown, timeoutMs = 15_000): Promise<WsFrame> {
    const id = String(++this.seq);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no answer to ${action}`)), timeoutMs);
      this.waiters.set(id, {
        resolve: (f) => {
          clearTimeout(t);
          resolve(f);
        },
        reject: (e) => {
          clearTimeout(t);
          reject(e);
        },
      });
      this.socket.send(JSON.stringify({ id, type: 'request', action, payload }));
    });
  }
  sendRaw(text: string) {
    this.socket.send(text);
  }
  /** Resolves with the first notification (already received or future) matching `pred`. */
  waitFor(pred: (f: WsFrame) => boolean, timeoutMs = 15_000): Promise<WsFrame> {
    const found = this.notifications.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.listeners.delete(check);
        reject(new Error(`notification not received; got ${this.notifications.map((n) => n.action).join(', ')}`));
      }, timeoutMs);
      const check = () => {
        const f = this.notifications.find(pred);
        if (f) {
          clearTimeout(t);
          this.listeners.delete(check);
          resolve(f);
        }
      };
      this.listeners.add(check);
    });
  }
  close() {
    this.socket.close();
  }
}

/**
 * The SDK client hands every request the same long-lived AbortSignal, and Node's fetch adds an abort
 * listener to it per request, dropped only when the request is collected: thousands of calls on one
 * client print MaxListenersExceededWarning (harmless, bench/README.md). A signal that follows it
 * (AbortSignal.any) still aborts the request when the client closes, without a listener on it.
 */
const fetchOnOwnSignal = (url: string | URL, init?: RequestInit) => fetch(url, init?.signal ? { ...init, signal: AbortSignal.any([init.signal]) } : init);

/** A real MCP client (Streamable HTTP) acting as an agent with a bearer token. */
export async function connectMcp(
  url: string,
  token: string,
): Promise<Client & { callJson(name: string, args: Record<string, unknown>): Promise<{ isError: boolean; json: any; text: string }> }> {
  const client = new Client({ name: 'kandev-test-agent', version: '0.1.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token}` } }, fetch: fetchOnOwnSignal }),
  );
  return Object.assign(client, {
    async callJson(name: string, args: Record<string, unknown>) {
      const res = (await client.callTool({ name, arguments: args })) as { isError?: boolean; content: Array<{ type: string; text?: string }> };
      const text = res.content.find((c) => c.type === 'text')?.text ?? '';
      let json: unknown = null;
      try {
        json = JSON.parse(text);
      } catch {
        /* error text */
      }
      return { isError: Boolean(res.isError), json, text };
    },
  });
}

/**
 * Poll until fn returns a truthy value (or throw after timeoutMs). The default is a hang guard, not
 * a bound of anything under test: a condition with a bound of its own passes it. 30 s, because the
 * niced test lane on a busy CI runner has taken more than the former 10 s for conditions that hold
 * in a second on a quiet machine.
 */
export async function eventually<T>(fn: () => Promise<T | null | undefined | false>, timeoutMs = 30_000, intervalMs = 50): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Is this pid alive? (signal 0) */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
