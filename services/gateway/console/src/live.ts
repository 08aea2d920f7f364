import { ApiError, post } from './api';
import { tokenRefused } from './auth';
import { backoffMs } from './model';
import type { PushNotification } from '@kandev/contracts';

export type LiveState = 'connecting' | 'live' | 'offline';
type Sub = { workspace_id: string } | { task_id: string };
const keyOf = (s: Sub) => ('workspace_id' in s ? `w:${s.workspace_id}` : `t:${s.task_id}`);

/**
 * The console's one /ws connection. It (re)subscribes whatever the views asked for, reconnects with
 * backoff when the socket drops, and tells views to re-read after a reconnect: pushes are best
 * effort with no replay, so what happened while offline is only in the HTTP API.
 */
export class Live {
  private ws: WebSocket | null = null;
  private attempt = 0;
  private seq = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private readonly subs = new Map<string, { sub: Sub; refs: number }>();
  private readonly pending = new Map<string, (frame: any) => void>();
  private readonly listeners = new Set<(n: PushNotification) => void>();
  private readonly stateListeners = new Set<(s: LiveState, resync: boolean) => void>();
  /** Subscriptions the server refused (e.g. a gateway without `subscribe {workspace_id}`). */
  readonly refused = new Set<string>();
  state: LiveState = 'connecting';

  constructor(private readonly token: string) {
    void this.connect();
  }

  onNotification(fn: (n: PushNotification) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }
  onState(fn: (s: LiveState, resync: boolean) => void): () => void {
    this.stateListeners.add(fn);
    return () => this.stateListeners.delete(fn);
  }

  /** Subscribe (reference counted); the returned function drops this reference. */
  subscribe(sub: Sub): () => void {
    const key = keyOf(sub);
    const have = this.subs.get(key);
    if (have) have.refs++;
    else {
      this.subs.set(key, { sub, refs: 1 });
      this.send('subscribe', sub);
    }
    return () => {
      const s = this.subs.get(key);
      if (!s) return;
      if (--s.refs > 0) return;
      this.subs.delete(key);
      this.send('unsubscribe', sub);
    };
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.ws?.close(1000);
  }

  private setState(s: LiveState, resync = false) {
    this.state = s;
    this.stateListeners.forEach((fn) => fn(s, resync));
  }

  /** Whether this gateway offers POST /ws/tickets; learnt from the first try (an older one answers 404). */
  private ticketsOffered = true;

  /**
   * How the socket proves who it is: a single-use ticket from POST /ws/tickets, so the
   * long-lived operator token never appears in a URL (access logs, proxies). Only a gateway without
   * that route gets `?token=`. null: no way to connect now (the token was refused, or the gateway is
   * unreachable: the caller retries with backoff).
   */
  private async credential(): Promise<[string, string] | null> {
    if (!this.ticketsOffered) return ['token', this.token];
    try {
      const { ticket } = await post<{ ticket: string }>('/ws/tickets');
      return ['ticket', ticket];
    } catch (e) {
      if (e instanceof ApiError && e.routeMissing) {
        this.ticketsOffered = false;
        return ['token', this.token];
      }
      return null; // a 401 already signed the console out (api.ts); anything else is retried
    }
  }

  private async connect() {
    if (this.closed) return;
    this.setState('connecting');
    const url = new URL('/ws', location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const credential = await this.credential();
    if (this.closed) return;
    if (!credential) {
      this.setState('offline');
      this.timer = setTimeout(() => void this.connect(), backoffMs(this.attempt++));
      return;
    }
    url.searchParams.set(credential[0], credential[1]);
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.onopen = () => {
      const reconnect = this.attempt > 0 || this.everOpen;
      this.everOpen = true;
      this.attempt = 0;
      this.refused.clear();
      for (const { sub } of this.subs.values()) this.send('subscribe', sub);
      this.setState('live', reconnect);
    };
    ws.onmessage = (ev) => {
      let frame: any;
      try {
        frame = JSON.parse(String(ev.data));
      } catch {
        return;
      }
      if (frame.type === 'notification') this.listeners.forEach((fn) => fn(frame as PushNotification));
      else if (frame.id && this.pending.has(frame.id)) {
        this.pending.get(frame.id)!(frame);
        this.pending.delete(frame.id);
      }
    };
    ws.onclose = (ev) => {
      this.ws = null;
      this.pending.clear();
      if (this.closed) return;
      this.setState('offline');
      // 4401: the token expired. Reconnecting with it cannot work; the app asks for a new one.
      if (ev.code === 4401) {
        tokenRefused();
        return;
      }
      this.timer = setTimeout(() => void this.connect(), backoffMs(this.attempt++));
    };
  }
  private everOpen = false;

  private send(action: string, payload: Sub) {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return; // sent on (re)open
    const id = String(++this.seq);
    if (action === 'subscribe') {
      this.pending.set(id, (frame) => {
        if (frame.type === 'error') {
          this.refused.add(keyOf(payload));
          this.setState(this.state);
        }
      });
    }
    ws.send(JSON.stringify({ id, type: 'request', action, payload }));
  }
}
