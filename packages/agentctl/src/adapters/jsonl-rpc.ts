import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { z } from 'zod';
import type { Logger } from '../log.js';

/*
 * JSON-RPC over JSON lines without the "jsonrpc" member, as the Codex app-server speaks it. Requests
 * flow both ways: agentctl calls the agent (turn/start, turn/interrupt) and the agent calls agentctl
 * (approval requests).
 */

const RpcId = z.union([z.string(), z.number()]);
type RpcId = z.infer<typeof RpcId>;

const RpcErrorBody = z.object({ code: z.number().int(), message: z.string(), data: z.unknown().optional() });

const Inbound = z.union([
  z.object({ id: RpcId, method: z.string(), params: z.unknown().optional() }).transform((m) => ({ kind: 'request' as const, ...m })),
  z.object({ method: z.string(), params: z.unknown().optional() }).transform((m) => ({ kind: 'notification' as const, ...m })),
  // Errors before results: an absent `result` would otherwise satisfy z.unknown().
  z.object({ id: RpcId.nullable(), error: RpcErrorBody }).transform((m) => ({ kind: 'error' as const, ...m })),
  z.object({ id: RpcId, result: z.unknown() }).transform((m) => ({ kind: 'result' as const, ...m })),
]);

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

export type InboundRequestHandler = (method: string, params: unknown) => Promise<unknown>;
export type InboundNotificationHandler = (method: string, params: unknown) => void;

export class JsonLineRpc {
  private nextId = 1;
  private readonly waiting = new Map<RpcId, { resolve(result: unknown): void; reject(err: Error): void; method: string }>();
  private requestHandler: InboundRequestHandler = (method) => Promise.reject(new RpcError(-32601, `method not found: ${method}`));
  private notificationHandler: InboundNotificationHandler = () => {};
  private open = true;

  constructor(
    input: Readable,
    private readonly output: Writable,
    private readonly log: Logger,
  ) {
    const lines = createInterface({ input, crlfDelay: Infinity });
    lines.on('line', (line) => this.receive(line));
    lines.once('close', () => {
      this.open = false;
      for (const [, w] of this.waiting) w.reject(new Error(`connection closed before ${w.method} was answered`));
      this.waiting.clear();
    });
  }

  onRequest(handler: InboundRequestHandler): void {
    this.requestHandler = handler;
  }

  onNotification(handler: InboundNotificationHandler): void {
    this.notificationHandler = handler;
  }

  request(method: string, params: unknown): Promise<unknown> {
    if (!this.open) return Promise.reject(new Error(`connection closed; cannot send ${method}`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, method });
      this.send({ id, method, params });
    });
  }

  notify(method: string, params?: unknown): void {
    this.send(params === undefined ? { method } : { method, params });
  }

  private send(message: Record<string, unknown>): void {
    if (!this.open) return;
    this.output.write(`${JSON.stringify(message)}\n`);
  }

  private receive(line: string): void {
    if (!line.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch {
      this.log.warn({ line: line.slice(0, 200) }, 'agent wrote a line that is not JSON');
      return;
    }
    const parsed = Inbound.safeParse(raw);
    if (!parsed.success) {
      this.log.warn({ line: line.slice(0, 200) }, 'agent wrote a message that is not JSON-RPC');
      return;
    }
    const message = parsed.data;
    switch (message.kind) {
      case 'notification':
        this.notificationHandler(message.method, message.params);
        return;
      case 'request':
        this.requestHandler(message.method, message.params).then(
          (result) => this.send({ id: message.id, result: result ?? {} }),
          (err: unknown) => {
            const e = err instanceof RpcError ? err : new RpcError(-32603, err instanceof Error ? err.message : String(err));
            this.send({ id: message.id, error: { code: e.code, message: e.message } });
          },
        );
        return;
      case 'result':
      case 'error': {
        const waiter = message.id === null ? undefined : this.waiting.get(message.id);
        if (!waiter || message.id === null) {
          this.log.warn({ id: message.id }, 'response to an unknown request');
          return;
        }
        this.waiting.delete(message.id);
        if (message.kind === 'result') waiter.resolve(message.result);
        else waiter.reject(new RpcError(message.error.code, `${waiter.method} failed: ${message.error.message}`, message.error.data));
      }
    }
  }
}
