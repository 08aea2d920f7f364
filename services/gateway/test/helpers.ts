import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import { signOperatorToken, startService, type RunningService } from '@kandev/runtime';
import { gatewayService } from '../src/service.js';

export const SECRET = 'test-secret-0123456789';

export async function startGateway(natsUrl: string, extra: Record<string, string> = {}): Promise<{ running: RunningService; http: string; ws: string }> {
  const running = await startService(gatewayService, {
    ...process.env,
    NATS_URL: natsUrl,
    GATEWAY_PORT: '0',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    KANDEV_JWT_SECRET: SECRET,
    ...extra,
  });
  const http = running.urls.http!;
  return { running, http, ws: `${http.replace(/^http/, 'ws')}/ws` };
}

export const operatorToken = (workspaces: string[] = ['*'], sub = 'alice') => signOperatorToken(SECRET, { sub, workspaces });

const now = () => new Date().toISOString();

export const fixtures = {
  workspace: (id: string, name = 'ws') => ({ id, name, created_at: now() }),
  task: (id: string, workspaceId: string) => ({
    id,
    workspace_id: workspaceId,
    parent_id: null,
    title: 'a task',
    status: 'TODO' as const,
    office: false,
    agent: null,
    archived_at: null,
    cancelled_at: null,
    created_at: now(),
    updated_at: now(),
  }),
  session: (id: string, taskId: string) => ({
    id,
    task_id: taskId,
    state: 'RUNNING' as const,
    error_message: null,
    is_primary: true,
    agent: 'scripted-acp',
    started_at: now(),
    completed_at: null,
    updated_at: now(),
  }),
  queued: (id: string, taskId: string) => ({
    id,
    task_id: taskId,
    session_id: taskId,
    position: 1,
    prompt: 'later',
    sender_task_id: null,
    queued_by: 'operator:alice',
    queued_at: now(),
  }),
};

/** A WebSocket client that keeps replies and notifications in separate queues. */
export class WsTestClient {
  private readonly replies: unknown[] = [];
  private readonly notifications: unknown[] = [];
  private readonly waiters: Array<{ kind: 'reply' | 'notification'; resolve: (m: unknown) => void }> = [];
  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data) => {
      const msg = JSON.parse(data.toString()) as { type?: string };
      const kind = msg.type === 'notification' ? 'notification' : 'reply';
      const i = this.waiters.findIndex((w) => w.kind === kind);
      if (i >= 0) this.waiters.splice(i, 1)[0]!.resolve(msg);
      else (kind === 'notification' ? this.notifications : this.replies).push(msg);
    });
  }

  static open(url: string, headers: Record<string, string> = {}): Promise<WsTestClient> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url, { headers });
      socket.once('open', () => resolve(new WsTestClient(socket)));
      socket.once('error', reject);
      socket.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
    });
  }

  sendRaw(text: string): void {
    this.socket.send(text);
  }

  /** Send a request frame and wait for the next reply (frames are answered in order here). */
  async call(action: string, payload: unknown, id: string = randomUUID()): Promise<Record<string, any>> {
    this.socket.send(JSON.stringify({ id, type: 'request', action, payload }));
    return (await this.next('reply')) as Record<string, any>;
  }

  next(kind: 'reply' | 'notification', timeoutMs = 5_000): Promise<Record<string, any>> {
    const queue = kind === 'reply' ? this.replies : this.notifications;
    if (queue.length) return Promise.resolve(queue.shift() as Record<string, any>);
    return new Promise((resolve, reject) => {
      const waiter = { kind, resolve: (m: unknown) => (clearTimeout(timer), resolve(m as Record<string, any>)) };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(new Error(`no ${kind} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  pendingNotifications(): number {
    return this.notifications.length;
  }

  close(): Promise<void> {
    if (this.socket.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((r) => {
      this.socket.once('close', () => r());
      this.socket.close();
    });
  }
}

/** Try an upgrade that should be refused; resolves with the HTTP status and JSON body. */
export function refusedUpgrade(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { headers });
    socket.once('open', () => {
      socket.close();
      reject(new Error('upgrade was accepted'));
    });
    socket.once('unexpected-response', (req, res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => {
        req.destroy();
        resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : null });
      });
    });
    socket.once('error', () => undefined);
  });
}
