import type { OperatorActor } from '@kandev/contracts';
import type { Logger } from '@kandev/runtime';
import type { WebSocket } from 'ws';

/** Above this much unsent data a socket is a slow consumer and is closed rather than buffered without bound. */
const MAX_BUFFERED_BYTES = 8 * 1024 * 1024;

/** One connected operator socket. */
export class WsClient {
  /** Cleared on every heartbeat ping, set by the pong. */
  alive = true;
  constructor(
    readonly id: string,
    readonly socket: WebSocket,
    readonly actor: OperatorActor,
    readonly log: Logger,
  ) {}

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  send(frame: unknown): void {
    this.sendText(JSON.stringify(frame));
  }

  /** Pre-serialised frame (notifications are serialised once for every subscriber). */
  sendText(text: string): void {
    if (!this.open) return;
    if (this.socket.bufferedAmount > MAX_BUFFERED_BYTES) {
      this.log.warn({ buffered: this.socket.bufferedAmount }, 'closing slow websocket consumer');
      this.socket.close(1013, 'slow consumer');
      return;
    }
    this.socket.send(text);
  }
}
