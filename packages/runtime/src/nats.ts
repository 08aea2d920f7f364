import { connect } from '@nats-io/transport-node';
import { TimeoutError, type NatsConnection } from '@nats-io/nats-core';
import { unavailable } from '@kandev/contracts';

export type { NatsConnection } from '@nats-io/nats-core';

export interface NatsOptions {
  url: string;
  name: string;
  user?: string | undefined;
  pass?: string | undefined;
  /**
   * How long a request sent on this connection without a deadline of its own waits for its reply
   * (REQUEST_TIMEOUT_MS; see `request()`); default DEFAULT_REQUEST_TIMEOUT_MS.
   */
  requestTimeoutMs?: number | undefined;
  /** How long one dial may take, from the TCP connect to the server's first PONG; default 5 s. */
  dialTimeoutMs?: number | undefined;
}

/**
 * How this connection is admitted, for /readyz (`nats_auth`): `user` when it logged in as a user on
 * a server that requires one, `none` when the server lets anyone in (ADR 0054).
 */
export function natsAuthOf(nc: NatsConnection, user: string | undefined): 'user' | 'none' {
  return user && nc.info?.auth_required ? 'user' : 'none';
}

/** Dials of the first connection that may time out before the start fails. */
export const FIRST_CONNECT_ATTEMPTS = 4;

/**
 * Connect with reconnects forever: a service outlives a NATS restart. The first connection is
 * retried when a dial times out: on a loaded machine a starting service's event loop can stall past
 * the dial timeout while the server's answer waits unread, and the timer runs first when the loop
 * resumes (a CI run saw the orchestrator fail to start so). A refused or rejected dial fails at
 * once: there is nothing to wait for.
 */
export async function connectNats(opts: NatsOptions): Promise<NatsConnection> {
  for (let attempt = 1; ; attempt++) {
    try {
      const nc = await connect({
        servers: opts.url.split(',').map((s) => s.trim()),
        name: opts.name,
        ...(opts.user ? { user: opts.user, pass: opts.pass ?? '' } : {}),
        maxReconnectAttempts: -1,
        reconnectTimeWait: RECONNECT_TIME_WAIT_MS,
        timeout: opts.dialTimeoutMs ?? 5_000,
        // The client would otherwise build two Error objects (stack captures) per request, about 60 µs
        // of CPU per NATS round trip; request() reports failures with the endpoint's name instead.
        noAsyncTraces: true,
      });
      links.set(nc, new NatsLink(nc, opts.requestTimeoutMs));
      return nc;
    } catch (err) {
      if (!(err instanceof TimeoutError) || attempt >= FIRST_CONNECT_ATTEMPTS) throw err;
    }
  }
}

/** Between two reconnect attempts (the client adds up to 100 ms of jitter). */
const RECONNECT_TIME_WAIT_MS = 250;

/**
 * After this connection reconnects, how long its peers may still be reconnecting: every service
 * retries every RECONNECT_TIME_WAIT_MS (+ jitter), so on a busy machine they are back well within
 * this. A "no responders" answer inside it means "not back yet", not "not there".
 */
export const PEERS_RECONNECT_MS = 2_000;

/**
 * Whether a connection is up, from its status events. The reason to know: nats.js does not keep
 * what is published while it is disconnected. Every reconnect attempt resets its outbound buffer,
 * so a request published then is dropped without a trace and its caller waits its whole deadline
 * (a NATS restart made the first requests after it wait 15 s, then answer 503). `request()` waits
 * for the connection instead, and a reply waits for it too.
 */
export class NatsLink {
  private down: { promise: Promise<void>; resolve: () => void } | null = null;
  private reconnectedAt = Number.NEGATIVE_INFINITY;

  constructor(
    nc: NatsConnection,
    /** The default deadline of a request sent on this connection (NatsOptions.requestTimeoutMs). */
    readonly requestTimeoutMs: number | undefined = undefined,
  ) {
    void this.follow(nc);
  }

  private async follow(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect' && !this.down) {
        let resolve!: () => void;
        const promise = new Promise<void>((r) => (resolve = r));
        this.down = { promise, resolve };
      } else if (s.type === 'reconnect') {
        this.reconnectedAt = performance.now();
        this.down?.resolve();
        this.down = null;
      }
    }
    this.down?.resolve(); // closed: whatever waits finds out from the client itself
  }

  get connected(): boolean {
    return this.down === null;
  }

  /** Resolves true once connected (at once if it is), false if `withinMs` passes first. */
  async up(withinMs: number): Promise<boolean> {
    const down = this.down;
    if (!down) return true;
    if (withinMs <= 0) return false;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<false>((r) => (timer = setTimeout(() => r(false), withinMs)));
    try {
      return await Promise.race([down.promise.then(() => true), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Resolves once connected; past `withinMs` fails UNAVAILABLE: `what` was not sent (publishing it now would drop it). */
  async sendable(withinMs: number, what: string): Promise<void> {
    if (!(await this.up(withinMs))) throw unavailable(`${what} not sent: no connection to NATS within ${Math.max(0, Math.round(withinMs))} ms`);
  }

  /** Reconnected less than PEERS_RECONNECT_MS ago: its peers may not be back yet. */
  get peersMayBeReconnecting(): boolean {
    return performance.now() - this.reconnectedAt < PEERS_RECONNECT_MS;
  }
}

const links = new WeakMap<NatsConnection, NatsLink>();

/** The link of a connection made by `connectNats` (one made otherwise has none, and is used as is). */
export function linkOf(nc: NatsConnection): NatsLink | undefined {
  return links.get(nc);
}
