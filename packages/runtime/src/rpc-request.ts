import { errors as natsErrors, headers as natsHeaders, NoRespondersError, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/nats-core';
import { Headers, KandevError, internalError, replyEnvelope, unavailable, validationError, type Endpoint, type Reply } from '@kandev/contracts';
import type { z } from 'zod';
import { SpanKind, inSpan, injectTrace, trace } from './tracing.js';
import { messagingSpanOf } from './semconv.js';
import { linkOf } from './nats.js';
import { busIdentityOf, signRequest } from './identity.js';
import { HEARTBEAT_MS, PROBE_AFTER_MS, progressOf, RECEIPT_WAIT_MS, replyInboxOf, SILENCE_MS, type ReplyCall } from './replies.js';
import { defaultRequestTimeoutMs, subjectTemplate } from './rpc.js';
import { serving, zodIssues } from './rpc-context.js';

const enc = new TextEncoder();
const dec = new TextDecoder();
/** Room left in the server's max payload for the message's headers (request id, trace context). */
const HEADER_ALLOWANCE = 4 * 1024;

export interface RequestOptions {
  /**
   * How long to wait for the reply. Inside a handler it is capped by what the handler may still wait
   * (`remainingMs()`: the incoming request's deadline less the reply's reserve), and defaults to all
   * of it; elsewhere it defaults to the connection's (REQUEST_TIMEOUT_MS in a service,
   * `defaultRequestTimeoutMs`).
   */
  timeoutMs?: number;
  /** Default: the request id of the request being handled (while its handler runs), if any. */
  requestId?: string;
}

/** The reply envelope schema of each endpoint, built once (zod compiles a schema on first use). */
const envelopes = new WeakMap<Endpoint, z.ZodType>();
function envelopeOf(endpoint: Endpoint): z.ZodType {
  let env = envelopes.get(endpoint);
  if (!env) envelopes.set(endpoint, (env = replyEnvelope(endpoint.result)));
  return env;
}

/**
 * Send a typed request. The payload is validated before it leaves; the reply is validated when
 * it arrives. Errors come back as KandevError; no responders or a timeout become UNAVAILABLE.
 * The time it waits travels with it (`kandev-timeout-ms`), so the handler's own requests stop
 * waiting when this one does.
 */
export async function request<E extends Endpoint>(
  nc: NatsConnection,
  endpoint: E,
  payload: z.input<E['request']>,
  opts: RequestOptions = {},
): Promise<z.infer<E['result']>> {
  const parsed = endpoint.request.safeParse(payload);
  if (!parsed.success) throw validationError(`invalid request for ${endpoint.name}`, zodIssues(parsed.error));
  const store = serving.getStore();
  // Only while the handler runs: a timer it started must not carry its deadline or request id for ever.
  const outer = store?.active ? store : undefined;
  const left = outer?.waitsEndBy !== undefined ? outer.waitsEndBy - performance.now() : undefined;
  const timeout = Math.floor(Math.min(opts.timeoutMs ?? left ?? defaultRequestTimeoutMs(nc), left ?? Number.POSITIVE_INFINITY));
  if (timeout <= 0) throw unavailable(`${endpoint.name} not sent: the caller's deadline has passed`);
  const requestId = opts.requestId ?? outer?.requestId;
  const sendSpan = messagingSpanOf('send', endpoint.subject, subjectTemplate(endpoint));
  return inSpan(sendSpan.name, { kind: SpanKind.CLIENT, attributes: sendSpan.attributes }, async () => {
    const h: MsgHdrs = natsHeaders();
    if (requestId) h.set(Headers.requestId, requestId);
    injectTrace(h);
    const data = enc.encode(JSON.stringify(parsed.data));
    // Signed once per request: a resend in send() carries the same assertion.
    const identity = busIdentityOf(nc);
    if (identity) await signRequest(identity, h, endpoint.subject, data, timeout, parsed.data, outer?.operatorAssertion);
    // The contracts bound every field so this cannot happen for a valid request; should it ever,
    // it is the caller's input that is too big (VALIDATION_ERROR), not a retryable outage.
    const maxPayload = nc.info?.max_payload;
    if (maxPayload && data.length > maxPayload - HEADER_ALLOWANCE)
      throw validationError(`request for ${endpoint.name} is too large`, { bytes: data.length, limit: maxPayload - HEADER_ALLOWANCE });
    const msg = await resendOnce(nc, endpoint, data, h, timeout);
    let body: unknown;
    try {
      body = JSON.parse(dec.decode(msg.data));
    } catch (e) {
      throw internalError(`reply of ${endpoint.name} is not JSON`, e);
    }
    const env = envelopeOf(endpoint).safeParse(body);
    if (!env.success) throw new KandevError('INTERNAL_ERROR', `invalid reply from ${endpoint.name}`, zodIssues(env.error));
    const reply = env.data as Reply<z.infer<E['result']>>;
    if (!reply.ok) throw KandevError.from(reply.error);
    return reply.result;
  });
}

/**
 * B-6 (ADR 0062): an idempotent control (`endpoint.idempotent`: stop, cancel, tree holds) whose
 * replica is gone — nobody serves it, or the replica that accepted it died or fell silent
 * mid-request (ADR 0044's UNAVAILABLE) — is sent once more, within what is left of its deadline,
 * to the replicas still there. Sending it twice has the effect of sending it once, so a replica's
 * death costs its caller nothing. Anything else fails as it did; a non-idempotent request is never
 * resent (its first attempt may have applied).
 */
async function resendOnce(nc: NatsConnection, endpoint: Endpoint, data: Uint8Array, h: MsgHdrs, timeout: number): Promise<Msg> {
  if (!endpoint.idempotent) return send(nc, endpoint, data, h, timeout);
  const started = performance.now();
  try {
    return await send(nc, endpoint, data, h, timeout);
  } catch (e) {
    const left = Math.floor(timeout - (performance.now() - started));
    if (!replicaGone.has(e as object) || left < RESEND_MIN_MS) throw e;
    trace.getActiveSpan()?.addEvent('resend', { 'kandev.resend_reason': (e as Error).message, 'kandev.resend_left_ms': left });
    return send(nc, endpoint, data, h, left);
  }
}
/** A resend needs time for a receipt, a decision and its reply. */
const RESEND_MIN_MS = 500;
/** Errors of `send` that mean the replica serving the request is gone (resendOnce). */
const replicaGone = new WeakSet<object>();
const gone = (e: KandevError): KandevError => (replicaGone.add(e), e);

/** How often a request that met "no responders" right after a reconnect is sent again. */
const NO_RESPONDERS_RETRY_MS = 50;

/**
 * One request on the wire, within `timeout` from now. On a connection from `connectNats` it is
 * published only while connected (the client drops what is published while it is disconnected, see
 * NatsLink), and "no responders" just after a reconnect is retried: the responders are
 * reconnecting too, and nothing was delivered, so sending again cannot run anything twice.
 *
 * The handler answers with a receipt at once and a heartbeat every HEARTBEAT_MS (replies.ts,
 * ADR 0032): a request nobody took (it reached a replica that had just died) is sent again after
 * RECEIPT_WAIT_MS instead of waiting out the deadline, and one whose handler fell silent fails
 * UNAVAILABLE after SILENCE_MS.
 */
async function send(nc: NatsConnection, endpoint: Endpoint, data: Uint8Array, h: MsgHdrs, timeout: number): Promise<Msg> {
  const link = linkOf(nc);
  const sendBy = performance.now() + timeout;
  const leftNow = () => Math.floor(sendBy - performance.now());
  const timedOut = () => unavailable(`${endpoint.name} timed out after ${timeout} ms`);
  const call = replyInboxOf(nc).open(endpoint.subject);
  h.set(Headers.receipt, String(HEARTBEAT_MS));
  try {
    let first = true;
    for (;;) {
      // The first try waits exactly `timeout` (what the caller was promised); a later one what is left.
      let left = first ? timeout : leftNow();
      first = false;
      if (left <= 0) throw timedOut();
      if (link && !link.connected) {
        await link.sendable(left, endpoint.name);
        left = leftNow();
        if (left <= 0) throw timedOut();
      }
      h.set(Headers.timeout, String(left));
      try {
        nc.publish(endpoint.subject, data, { reply: call.subject, headers: h });
      } catch (e) {
        throw unavailable(`${endpoint.name} failed: ${(e as Error).message}`, e);
      }
      // A resend is only worth it if the time left after waiting for the receipt still allows an answer.
      // Each resend goes to a replica the queue group picks anew, so with one of two replicas dead
      // (and not yet noticed by the server) a request almost surely lands on the live one.
      const mayResend = left > 2 * RECEIPT_WAIT_MS;
      let msg = await call.next(mayResend ? RECEIPT_WAIT_MS : left);
      if (!msg) {
        if (mayResend && !(link && !link.connected)) continue; // lost on the way: nobody runs it
        if (link && !link.connected) continue; // NATS went away meanwhile: wait for it above, then resend
        throw timedOut();
      }
      if (isNoRespondersStatus(msg)) {
        if (link?.peersMayBeReconnecting && sendBy - performance.now() > 2 * NO_RESPONDERS_RETRY_MS) {
          await new Promise((r) => setTimeout(r, NO_RESPONDERS_RETRY_MS));
          continue;
        }
        throw gone(unavailable(`no ${endpoint.name} responder`, new NoRespondersError(endpoint.subject)));
      }
      // Receipt and heartbeats until the reply. Silence while this side's own link is down is NATS
      // restarting, not the handler dying: the reply follows the reconnect (ADR 0014).
      const liveness = msg.headers?.get(Headers.liveness) || undefined;
      while (progressOf(msg)) {
        msg = await nextBeat(nc, call, liveness, leftNow);
        if (msg) continue;
        if (leftNow() <= 0) throw timedOut();
        if (link && !link.connected && (await link.up(leftNow()))) {
          msg = await call.next(Math.min(SILENCE_MS, leftNow()));
          if (msg) continue;
          if (leftNow() <= 0) throw timedOut();
        }
        throw gone(unavailable(`${endpoint.name} responder went silent for ${SILENCE_MS} ms after accepting the request (its replica stopped?)`));
      }
      if (isNoRespondersStatus(msg))
        throw gone(unavailable(`${endpoint.name} responder's replica is gone: its NATS connection closed after it accepted the request`));
      return msg;
    }
  } catch (e) {
    if (e instanceof natsErrors.PermissionViolationError) throw unavailable(`${endpoint.name} refused by NATS: ${e.message}`, e);
    throw e;
  } finally {
    call.close();
  }
}

/**
 * The next message of a request being worked on, or null after SILENCE_MS (or the deadline) without
 * one. A heartbeat PROBE_AFTER_MS late makes it ask whether the handler's connection is still there
 * (replies.ts). "No responders" is believed only when a second probe, HEARTBEAT_MS later, meets it
 * too with no heartbeat between: a handler whose NATS node just died is reconnecting to another
 * one, and its heartbeats resume when it has. That second "no responders" is returned as the
 * message, for the caller to fail at once. A probe that is delivered (no answer) means the
 * connection is there: the wait goes on to the silence limit.
 */
async function nextBeat(nc: NatsConnection, call: ReplyCall, liveness: string | undefined, leftNow: () => number): Promise<Msg | null> {
  const silentBy = performance.now() + SILENCE_MS;
  const untilSilent = () => Math.min(Math.floor(silentBy - performance.now()), leftNow());
  if (!liveness) return call.next(untilSilent());
  const probe = () => {
    try {
      nc.publish(liveness, undefined, { reply: call.subject });
    } catch {
      // The connection is closing or closed: the wait ends the call as it would have.
    }
  };
  let msg = await call.next(Math.min(PROBE_AFTER_MS, untilSilent()));
  for (let gone = 0; !msg && untilSilent() > 0;) {
    probe();
    msg = await call.next(Math.min(HEARTBEAT_MS, untilSilent()));
    if (!msg) return call.next(untilSilent()); // the probe was delivered: the connection is there
    if (!isNoRespondersStatus(msg) || ++gone === 2) return msg;
    msg = await call.next(Math.min(HEARTBEAT_MS, untilSilent())); // a reconnecting handler beats again
  }
  return msg;
}

/** The server's "no responders" status (503), which it sends to the reply subject of a request nobody subscribes to. */
function isNoRespondersStatus(msg: Msg): boolean {
  return msg.data.length === 0 && msg.headers?.code === 503;
}
