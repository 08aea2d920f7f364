import { createInbox, errors as natsErrors, headers as natsHeaders, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/nats-core';
import { Headers } from '@kandev/contracts';

/**
 * Receipts and heartbeats: how a caller tells "my request is being worked on" from "the replica it
 * reached is gone" without waiting out its whole deadline (ADR 0032).
 *
 * NATS core delivers a request to one member of the queue group and nothing more: when that member
 * has died but the server has not noticed yet (a process killed an instant earlier, a frozen or
 * partitioned pod whose TCP connection stays open until the server's ping timeout), the request is
 * lost and the caller only learns it at its deadline. So every request asks for a receipt
 * (`kandev-receipt-ms: <interval>`): the handler answers at once with an empty `accepted` message,
 * then with a `working` message every interval until its reply. The caller resends a request that
 * got no receipt in RECEIPT_WAIT_MS, for as long as its deadline leaves room for an answer (nobody took it, so sending it again runs nothing twice; a
 * resend that reaches a replica already running it only gets another receipt, see `InFlightReplies`),
 * and gives up on one whose handler fell silent for SILENCE_MS (its replica died mid-request: the
 * effect may or may not have happened, so that is an UNAVAILABLE error, not a silent retry).
 *
 * A replica that was killed is told from one that is only slow sooner than that: the receipt names
 * a liveness subject, which only the handler's connection subscribes to (its reply inbox). Once a
 * heartbeat is PROBE_AFTER_MS late the caller sends a request there: the server answers "no
 * responders" at once if that connection is gone (the process died and its socket closed), and the
 * caller fails when a second probe a heartbeat later meets it too (rpc.ts `nextBeat`: a handler
 * reconnecting to another NATS node is briefly absent as well). A frozen process's connection still
 * subscribes, so its callers wait SILENCE_MS (ADR 0044).
 */

/** How often a handler says it is still working (the interval the caller asks for). */
export const HEARTBEAT_MS = 1_000;
/** A request without a receipt after this long was lost: it is sent again. */
export const RECEIPT_WAIT_MS = 2_000;
/**
 * A handler silent this long after its receipt is taken for dead. Several heartbeats long, so a
 * handler whose event loop stalls on a busy machine is not mistaken for a dead one.
 */
export const SILENCE_MS = 6 * HEARTBEAT_MS;
/** A heartbeat this late makes the caller ask whether the handler's connection is still there. */
export const PROBE_AFTER_MS = 1.5 * HEARTBEAT_MS;

/** Values of the `kandev-progress` header on the messages that are not the reply. */
export type Progress = 'accepted' | 'working';

function progressHeaders(p: Progress): MsgHdrs {
  const h = natsHeaders();
  h.set(Headers.progress, p);
  return h;
}
// Built once: nats.js encodes the headers when it publishes, so one object serves every message.
const WORKING = progressHeaders('working');
/** The receipt of one connection's handlers: `accepted`, and the subject that shows the connection is there. */
const receipts = new WeakMap<NatsConnection, MsgHdrs>();
function receiptOf(nc: NatsConnection): MsgHdrs {
  let h = receipts.get(nc);
  if (!h) {
    h = progressHeaders('accepted');
    h.set(Headers.liveness, replyInboxOf(nc).liveness);
    receipts.set(nc, h);
  }
  return h;
}

/** The progress a message carries, or undefined for the reply itself. */
export function progressOf(msg: Msg): Progress | undefined {
  const p = msg.headers?.get(Headers.progress);
  return p === 'accepted' || p === 'working' ? p : undefined;
}

/**
 * The handler's side: a receipt now and a heartbeat every interval the caller asked for, until
 * `stop()` (called before the reply is sent). Requests from callers that ask for none (an older
 * caller, the `nats` CLI) get neither.
 */
export function acknowledge(nc: NatsConnection, msg: Msg, heartbeatsWhile: () => boolean): { stop(): void } {
  const interval = Number(msg.headers?.get(Headers.receipt));
  if (!msg.reply || !(interval > 0)) return { stop() {} };
  msg.respond(undefined, { headers: receiptOf(nc) });
  const timer = setInterval(
    () => {
      // A heartbeat published while NATS is down would be dropped anyway; the caller's own link is
      // down then too (one server) or its silence limit covers the gap.
      if (heartbeatsWhile()) msg.respond(undefined, { headers: WORKING });
    },
    Math.max(100, interval),
  );
  return { stop: () => clearInterval(timer) };
}

/**
 * Requests a service is running, by the inbox their reply goes to: a resend of a request whose
 * receipt was late (not lost) reaches this replica again with the same inbox, and must not run twice.
 */
export class InFlightReplies {
  private readonly running = new Set<string>();
  /** True if the request is new here (and is now tracked until `done`). */
  begin(reply: string | undefined): boolean {
    if (!reply) return true;
    if (this.running.has(reply)) return false;
    this.running.add(reply);
    return true;
  }
  done(reply: string | undefined): void {
    if (reply) this.running.delete(reply);
  }
}

/** One request's view of its inbox: the messages that arrive for it, one at a time. */
export interface ReplyCall {
  /** The reply subject to send the request with (the same for every resend). */
  readonly subject: string;
  /**
   * The next message, or null if none arrives within `withinMs`. Rejects with the server's
   * permission error when it refuses this connection the request's subject or the inbox.
   */
  next(withinMs: number): Promise<Msg | null>;
  close(): void;
}

class Call implements ReplyCall {
  private readonly queued: Msg[] = [];
  private waiter: { resolve: (m: Msg | null) => void; reject: (e: Error) => void } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private failure: Error | undefined;
  constructor(
    readonly subject: string,
    readonly requestSubject: string,
    private readonly onClose: () => void,
  ) {}
  push(msg: Msg): void {
    if (this.waiter) this.settle(msg);
    else this.queued.push(msg);
  }
  fail(e: Error): void {
    this.failure = e;
    const w = this.waiter;
    this.waiter = undefined;
    clearTimeout(this.timer);
    w?.reject(e);
  }
  next(withinMs: number): Promise<Msg | null> {
    if (this.failure) return Promise.reject(this.failure);
    const msg = this.queued.shift();
    if (msg) return Promise.resolve(msg);
    if (withinMs <= 0) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
      this.timer = setTimeout(() => this.settle(null), withinMs);
    });
  }
  private settle(m: Msg | null): void {
    const w = this.waiter;
    this.waiter = undefined;
    clearTimeout(this.timer);
    w?.resolve(m);
  }
  close(): void {
    this.settle(null);
    this.onClose();
  }
}

/**
 * One wildcard inbox subscription per connection, shared by every request it sends (as the NATS
 * client's own request multiplexer does), routing each message to its request by the last token.
 * The client resubscribes it after a reconnect.
 */
class ReplyInbox {
  private readonly prefix = createInbox();
  /** Matches the inbox subscription but no call (their tokens are base 36): a request there is delivered and dropped, or meets "no responders" when this connection is gone. */
  readonly liveness = `${this.prefix}._liveness`;
  private readonly calls = new Map<string, Call>();
  private seq = 0;
  constructor(nc: NatsConnection) {
    nc.subscribe(`${this.prefix}.*`, {
      callback: (err, msg) => {
        if (err) return; // the connection closed: every waiting call ends at its own timer
        this.calls.get(msg.subject.slice(this.prefix.length + 1))?.push(msg);
      },
    });
    void this.followPermissionErrors(nc);
  }
  /**
   * The server refuses a publish or a subscription it does not permit with an asynchronous error,
   * not a reply: the calls it concerns fail with it (as the client's own request does), instead of
   * resending into the refusal until their deadline.
   */
  private async followPermissionErrors(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      if (s.type !== 'error' || !(s.error instanceof natsErrors.PermissionViolationError)) continue;
      const pe = s.error;
      for (const call of this.calls.values()) {
        if (pe.operation === 'subscription' ? pe.subject.startsWith(this.prefix) : pe.subject === call.requestSubject) call.fail(pe);
      }
    }
  }
  open(requestSubject: string): ReplyCall {
    const token = (++this.seq).toString(36);
    const call = new Call(`${this.prefix}.${token}`, requestSubject, () => this.calls.delete(token));
    this.calls.set(token, call);
    return call;
  }
}

const inboxes = new WeakMap<NatsConnection, ReplyInbox>();

/** The connection's shared reply inbox (made on first use). */
export function replyInboxOf(nc: NatsConnection): { open(requestSubject: string): ReplyCall; readonly liveness: string } {
  let inbox = inboxes.get(nc);
  if (!inbox) inboxes.set(nc, (inbox = new ReplyInbox(nc)));
  return inbox;
}
