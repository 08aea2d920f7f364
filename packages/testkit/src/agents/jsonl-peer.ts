import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { z } from 'zod';

/*
 * JSON-RPC over JSON lines as the Codex app-server speaks it: the "jsonrpc" member is omitted, a
 * request has `id` and `method`, a notification only `method`, a response `id` with `result` or `error`.
 */

export const RpcId = z.union([z.string(), z.number()]);
export type RpcId = z.infer<typeof RpcId>;

const RpcErrorBody = z.object({ code: z.number().int(), message: z.string(), data: z.unknown().optional() });

export const RpcInbound = z.union([
  z.object({ id: RpcId, method: z.string(), params: z.unknown().optional() }).transform((m) => ({ kind: 'request' as const, ...m })),
  z.object({ method: z.string(), params: z.unknown().optional() }).transform((m) => ({ kind: 'notification' as const, ...m })),
  // Errors before results: an absent `result` would otherwise satisfy z.unknown().
  z.object({ id: RpcId.nullable(), error: RpcErrorBody }).transform((m) => ({ kind: 'error' as const, ...m })),
  z.object({ id: RpcId, result: z.unknown() }).transform((m) => ({ kind: 'result' as const, ...m })),
]);
export type RpcInbound = z.infer<typeof RpcInbound>;

export class RpcFailure extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

export type RequestHandler = (method: string, params: unknown, id: RpcId) => Promise<unknown>;
export type NotificationHandler = (method: string, params: unknown) => void;

export class JsonLinePeer {
  private nextId = 1;
  private readonly pending = new Map<RpcId, { resolve(v: unknown): void; reject(e: Error): void }>();
  private requestHandler: RequestHandler = (method) => Promise.reject(new RpcFailure(-32601, `method not found: ${method}`));
  private notificationHandler: NotificationHandler = () => {};
  readonly closed: Promise<void>;

  constructor(
    input: Readable,
    private readonly output: Writable,
    private readonly tap: (message: RpcInbound) => void = () => {},
  ) {
    const lines = createInterface({ input, crlfDelay: Infinity });
    lines.on('line', (line) => this.receive(line));
    this.closed = new Promise((resolve) => lines.once('close', () => resolve()));
    void this.closed.then(() => {
      for (const [, p] of this.pending) p.reject(new Error('connection closed'));
      this.pending.clear();
    });
  }

  onRequest(handler: RequestHandler): this {
    this.requestHandler = handler;
    return this;
  }

  onNotification(handler: NotificationHandler): this {
    this.notificationHandler = handler;
    return this;
  }

  request(method: string, params: unknown): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.write({ id, method, params });
    });
  }

  notify(method: string, params: unknown): void {
    this.write({ method, params });
  }

  private write(message: Record<string, unknown>): void {
    this.output.write(`${JSON.stringify(message)}\n`);
  }

  private receive(line: string): void {
    if (!line.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch {
      this.write({ id: null, error: { code: -32700, message: 'parse error' } });
      return;
    }
    const parsed = RpcInbound.safeParse(raw);
    if (!parsed.success) {
      this.write({ id: null, error: { code: -32600, message: 'invalid request' } });
      return;
    }
    const message = parsed.data;
    this.tap(message);
    switch (message.kind) {
      case 'request':
        this.requestHandler(message.method, message.params, message.id).then(
          (result) => this.write({ id: message.id, result: result ?? {} }),
          (err: unknown) => {
            const failure = err instanceof RpcFailure ? err : new RpcFailure(-32603, err instanceof Error ? err.message : String(err));
            this.write({
              id: message.id,
              error: { code: failure.code, message: failure.message, ...(failure.data !== undefined ? { data: failure.data } : {}) },
            });
          },
        );
        break;
      case 'notification':
        this.notificationHandler(message.method, message.params);
        break;
      case 'result':
      case 'error': {
        if (message.id === null) return;
        const waiter = this.pending.get(message.id);
        if (!waiter) return;
        this.pending.delete(message.id);
        if (message.kind === 'result') waiter.resolve(message.result);
        else waiter.reject(new RpcFailure(message.error.code, message.error.message, message.error.data));
        break;
      }
    }
  }
}
