// A record of the control requests a fault test sends and what each caller was told, so the
// invariant checker can hold the system to its answers ("no accepted request is lost without an
// error to its caller", docs/operations.md).
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { WsClient } from './clients.js';

export type ControlKind =
  'task.stop' | 'child.stop' | 'session.cancel' | 'message.interrupt' | 'tree.pause' | 'tree.cancel' | 'tree.resume' | 'tree.restore' | 'wakeup.create';

/** What the caller was told: a success with its body, an error (any kind), or nothing at all. */
export type ControlAnswer = { ok: true; body: any } | { ok: false; error: string } | { ok: null; error: 'no answer' };

export interface ControlRequest {
  kind: ControlKind;
  /** The task acted on (for a cancel, the session's task). */
  task_id: string;
  session_id?: string;
  /** A message interrupt's prompt; the checker finds the message by it, so keep it unique. */
  prompt?: string;
  /** The request id the caller chose (x-request-id), when the surface takes one. */
  request_id?: string;
  /** A wakeup's idempotency key: a retry after an error sends the same key and must find the same wakeup. */
  idempotency_key?: string;
  sentAt: Date;
  answeredAt: Date;
  answer: ControlAnswer;
}

/** One bound for every answer: longer than any request's own timeout (the orchestrator's 20 s launch) with headroom. */
export const CONTROL_ANSWER_TIMEOUT_MS = 60_000;

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | typeof NO_ANSWER> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<typeof NO_ANSWER>((r) => (timer = setTimeout(() => r(NO_ANSWER), ms)));
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
const NO_ANSWER = Symbol('no answer');
/** The clients' own timeouts fire after the log's, so a silent request is recorded as unanswered, not as a client error. */
const CLIENT_TIMEOUT_SLACK_MS = 1_000;

/**
 * The control requests of one test, each sent through a public surface with its answer recorded.
 * Senders never throw: a refusal, a transport error and a missing answer are all recorded.
 */
export class ControlLog {
  readonly requests: ControlRequest[] = [];
  constructor(
    private readonly surfaces: { gatewayUrl: string; mcpUrl: string; operatorToken: string },
    private readonly timeoutMs = CONTROL_ANSWER_TIMEOUT_MS,
  ) {}

  /** Record one request sent by `send`, which resolves with the caller's answer. */
  async track(req: Omit<ControlRequest, 'sentAt' | 'answeredAt' | 'answer'>, send: () => Promise<ControlAnswer>): Promise<ControlRequest> {
    const sentAt = new Date();
    let answer: ControlAnswer;
    try {
      const r = await withTimeout(send(), this.timeoutMs);
      answer = r === NO_ANSWER ? { ok: null, error: 'no answer' } : r;
    } catch (e) {
      answer = { ok: false, error: `transport: ${(e as Error).message}` };
    }
    const rec: ControlRequest = { ...req, sentAt, answeredAt: new Date(), answer };
    this.requests.push(rec);
    return rec;
  }

  private async http(method: string, path: string, requestId: string, body?: unknown): Promise<ControlAnswer> {
    const res = await fetch(this.surfaces.gatewayUrl + path, {
      method,
      headers: { authorization: `Bearer ${this.surfaces.operatorToken}`, 'x-request-id': requestId, 'content-type': 'application/json' },
      body: JSON.stringify(body ?? {}),
      signal: AbortSignal.timeout(this.timeoutMs + CLIENT_TIMEOUT_SLACK_MS),
    });
    const text = await res.text();
    const json = text ? JSON.parse(text) : null;
    return res.ok ? { ok: true, body: json } : { ok: false, error: `${res.status} ${json?.error?.code ?? text}` };
  }

  /** POST /tasks/:id/stop. */
  stopTask(taskId: string) {
    const request_id = randomUUID();
    return this.track({ kind: 'task.stop', task_id: taskId, request_id }, () => this.http('POST', `/tasks/${taskId}/stop`, request_id));
  }

  /** POST /tasks/:id/tree/pause or cancel. */
  holdTree(taskId: string, mode: 'pause' | 'cancel') {
    const request_id = randomUUID();
    return this.track({ kind: `tree.${mode}`, task_id: taskId, request_id }, () => this.http('POST', `/tasks/${taskId}/tree/${mode}`, request_id));
  }

  /** POST /tasks/:id/tree/resume or restore: releases the hold rooted at the task. */
  releaseTree(taskId: string, mode: 'resume' | 'restore') {
    const request_id = randomUUID();
    return this.track({ kind: `tree.${mode}`, task_id: taskId, request_id }, () => this.http('POST', `/tasks/${taskId}/tree/${mode}`, request_id));
  }

  /** POST /wakeups with an idempotency key (a retry passes the same key and must find the same wakeup). */
  createWakeup(taskId: string, prompt: string, idempotencyKey: string = randomUUID()) {
    const request_id = randomUUID();
    return this.track({ kind: 'wakeup.create', task_id: taskId, request_id, idempotency_key: idempotencyKey }, () =>
      this.http('POST', '/wakeups', request_id, { task_id: taskId, reason: 'fault test', payload: { prompt }, idempotency_key: idempotencyKey }),
    );
  }

  /** `/ws` agent.cancel: the gateway picks the request id, so the checker matches by session and time. */
  cancelTurn(ws: WsClient, taskId: string, sessionId: string) {
    return this.track({ kind: 'session.cancel', task_id: taskId, session_id: sessionId }, async () => {
      const f = await ws.request('agent.cancel', { session_id: sessionId }, this.timeoutMs + CLIENT_TIMEOUT_SLACK_MS);
      return f.type === 'response' ? { ok: true, body: f.payload } : { ok: false, error: `${f.payload?.code}: ${f.payload?.message}` };
    });
  }

  /** A tool call of an agent over MCP, on a connection of its own that carries this request's id. */
  private async tool(agentToken: string, requestId: string, name: string, args: Record<string, unknown>): Promise<ControlAnswer> {
    const client = new Client({ name: 'kandev-fault-test', version: '0.1.0' });
    const headers = { authorization: `Bearer ${agentToken}`, 'x-request-id': requestId };
    await client.connect(new StreamableHTTPClientTransport(new URL(this.surfaces.mcpUrl), { requestInit: { headers } }));
    try {
      const res = (await client.callTool({ name, arguments: args }, undefined, { timeout: this.timeoutMs + CLIENT_TIMEOUT_SLACK_MS })) as {
        isError?: boolean;
        content: Array<{ type: string; text?: string }>;
      };
      const text = res.content.find((c) => c.type === 'text')?.text ?? '';
      return res.isError ? { ok: false, error: text } : { ok: true, body: JSON.parse(text) };
    } finally {
      await client.close().catch(() => undefined);
    }
  }

  /** message_task_kandev with delivery_mode interrupt, from the parent's agent. */
  interrupt(parentToken: string, taskId: string, prompt: string) {
    const request_id = randomUUID();
    return this.track({ kind: 'message.interrupt', task_id: taskId, prompt, request_id }, () =>
      this.tool(parentToken, request_id, 'message_task_kandev', { task_id: taskId, prompt, delivery_mode: 'interrupt' }),
    );
  }

  /** stop_task_kandev from the parent's agent. */
  stopChild(parentToken: string, taskId: string) {
    const request_id = randomUUID();
    return this.track({ kind: 'child.stop', task_id: taskId, request_id }, () => this.tool(parentToken, request_id, 'stop_task_kandev', { task_id: taskId }));
  }
}
