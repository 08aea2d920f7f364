import {
  errors as natsErrors,
  headers as natsHeaders,
  RequestError,
  TimeoutError,
  NoRespondersError,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
} from '@nats-io/nats-core';
import { Svcm, type Service } from '@nats-io/services';
import {
  Headers,
  KandevError,
  internalError,
  isKandevError,
  replyEnvelope,
  unavailable,
  validationError,
  SUBJECT_PREFIX,
  type Endpoint,
  type Reply,
} from '@kandev/contracts';
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import type { Logger } from './log.js';
import { SpanKind, extractTrace, inSpan, injectTrace, trace } from './tracing.js';
import { messagingSpanOf } from './semconv.js';
import { metrics } from './metrics.js';
import { linkOf, type NatsLink } from './nats.js';
import { BusIdentityError, busIdentityOf, signRequest, verifyRequest, type BusIdentity } from './identity.js';
import {
  acknowledge,
  InFlightReplies,
  HEARTBEAT_MS,
  PROBE_AFTER_MS,
  progressOf,
  RECEIPT_WAIT_MS,
  replyInboxOf,
  SILENCE_MS,
  type ReplyCall,
} from './replies.js';

const enc = new TextEncoder();
/** Room left in the server's max payload for the message's headers (request id, trace context). */
const HEADER_ALLOWANCE = 4 * 1024;
const dec = new TextDecoder();

export interface HandlerContext {
  requestId: string;
  log: Logger;
  /** The subject the request arrived on (instance-routed endpoints carry the instance id in it). */
  subject: string;
  /**
   * When the caller stops waiting, on this process's `performance.now()` clock (from the caller's
   * `kandev-timeout-ms` header); undefined when the caller sent none. `request()` made while the
   * handler runs already ends its wait before this, leaving time for the reply (`replyReserveMs`);
   * see `remainingMs()` for other waits.
   */
  deadline?: number | undefined;
  /**
   * Run `fn` once the reply to this request has been handed to NATS (or failed to be): follow-ups
   * of a decision already durable (events, teardowns) that must not delay the answer. Callbacks run
   * in registration order, each once, whatever the reply was; one that throws or rejects is logged.
   */
  afterReply(fn: () => unknown): void;
}
export type Handler<E extends Endpoint> = (req: z.infer<E['request']>, ctx: HandlerContext) => Promise<z.infer<E['result']>>;

export interface Registration<E extends Endpoint = Endpoint> {
  endpoint: E;
  handler: Handler<E>;
  /**
   * Queue group; default the service's. An instance-routed endpoint (its subject names one instance)
   * needs none and keeps the default: only that instance subscribes. (@nats-io/services treats `''`
   * as "the service's group" too, so there is no way to ask for no group.)
   */
  queue?: string;
}
/** Helper that keeps the endpoint and handler types tied together. */
export const on = <E extends Endpoint>(endpoint: E, handler: Handler<E>, queue?: string): Registration<E> =>
  queue === undefined ? { endpoint, handler } : { endpoint, handler, queue };

/**
 * A request without a deadline of its own (sent outside a handler, without `timeoutMs`) waits this
 * long for its reply, unless its connection was made with another (REQUEST_TIMEOUT_MS: every service
 * passes it to connectNats, so it is the default deadline of every request the service starts).
 */
export const DEFAULT_REQUEST_TIMEOUT_MS = 5_000;

/** The default deadline of requests sent on `nc` (REQUEST_TIMEOUT_MS for a service's connection). */
export function defaultRequestTimeoutMs(nc: NatsConnection): number {
  return linkOf(nc)?.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
}

/** The most a handler keeps back of its caller's deadline for its reply (see replyReserveMs). */
const REPLY_RESERVE_MAX_MS = 250;

/**
 * Of a caller's budget, the part a handler keeps for its answer: its own waits (onward requests,
 * registry reads, `remainingMs()`) end this much before the caller stops waiting, so a hop further
 * down that does not answer becomes the handler's error, audited and answered with its code (a
 * stop whose lifecycle does not accept its teardown: INTERNAL_ERROR, audited), instead of the
 * caller's bare timeout at the same moment. A tenth of the budget, at most 250 ms: each hop keeps
 * its own, so a chain of hops answers from the innermost that failed.
 */
export function replyReserveMs(budgetMs: number): number {
  return Math.min(REPLY_RESERVE_MAX_MS, Math.floor(budgetMs / 10));
}

const zodIssues = (e: z.ZodError) => ({ issues: e.issues.map((i) => ({ path: i.path.join('.'), message: i.message })) });

function toErrorBody(e: unknown) {
  if (isKandevError(e)) return e.toBody();
  return { code: 'INTERNAL_ERROR' as const, message: 'internal error' };
}

/**
 * Requests being handled by one service runtime: shutdown stops taking new ones, then waits here
 * until those already running have answered.
 */
export class InFlightRequests {
  private count = 0;
  private waiters: Array<() => void> = [];
  enter(): void {
    this.count++;
  }
  leave(): void {
    this.count--;
    if (this.count === 0) this.waiters.splice(0).forEach((r) => r());
  }
  /** Resolves once no request handler is running. */
  settled(): Promise<void> {
    return this.count === 0 ? Promise.resolve() : new Promise((r) => this.waiters.push(r));
  }
}

/**
 * What `$SRV.STATS` reports for one endpoint. @nats-io/services times its handler callback, which
 * only starts our async handling (a callback must not block the socket reader), so its own figures
 * read about 0 ms and never an error; these time the handling until the reply is sent, and count
 * every error reply.
 */
class EndpointStats {
  num_requests = 0;
  num_errors = 0;
  /** Nanoseconds, as the micro protocol reports them. */
  processing_time = 0;
  average_processing_time = 0;
  last_error = '';
  record(ms: number, error: { code: string; message: string } | undefined): void {
    this.num_requests++;
    this.processing_time += Math.round(ms * 1e6);
    this.average_processing_time = Math.round(this.processing_time / this.num_requests);
    if (error) {
      this.num_errors++;
      this.last_error = `${error.code}: ${error.message}`;
    }
  }
  reset(): void {
    this.num_requests = this.num_errors = this.processing_time = this.average_processing_time = 0;
    this.last_error = '';
  }
  snapshot() {
    const { num_requests, num_errors, processing_time, average_processing_time, last_error } = this;
    return { num_requests, num_errors, processing_time, average_processing_time, last_error };
  }
}

/** The request a handler is serving, for the requests it makes in turn (see `request()`). */
interface Serving {
  requestId: string;
  /** When the handler's own waits end: the caller's deadline less the reply's reserve. */
  waitsEndBy: number | undefined;
  /** False once the reply is sent: work the handler left running no longer inherits its deadline or request id. */
  active: boolean;
  /** The gateway's assertion behind this request, passed on with the operator actor (identity.ts). */
  operatorAssertion?: string | undefined;
}
const serving = new AsyncLocalStorage<Serving>();

/**
 * Milliseconds the handler being run may still wait (inside a handler, and while it runs), else
 * undefined: what is left of its caller's deadline less the reply's reserve (replyReserveMs). For
 * waits that are not NATS requests (an HTTP call, a poll, a registry read).
 */
export function remainingMs(): number | undefined {
  const s = serving.getStore();
  return s?.active && s.waitsEndBy !== undefined ? s.waitsEndBy - performance.now() : undefined;
}

/**
 * The low-cardinality form of an endpoint's subject, for span names: an instance endpoint
 * (`kandev.life.<instance>.exec.stop`) is named by its template (`kandev.life.*.exec.stop`).
 */
export const subjectTemplate = (endpoint: Endpoint): string => (endpoint.name.includes('*') ? `${SUBJECT_PREFIX}.${endpoint.name}` : endpoint.subject);

/**
 * Register endpoints as one @nats-io/services service (so $SRV.PING/INFO/STATS work), each in the
 * service's queue group. Requests and replies are validated against the contracts on the way in
 * and out; a handler throwing KandevError answers with its code, anything else INTERNAL_ERROR.
 * `inFlight` counts the requests being handled (the service runtime passes its own).
 */
export async function serveEndpoints(
  nc: NatsConnection,
  opts: {
    service: string;
    version?: string;
    instanceId: string;
    queue: string;
    log: Logger;
    inFlight?: InFlightRequests;
    /** Only these services may call these endpoints (verified on the bus, identity.ts); default any. */
    callers?: readonly string[];
  },
  registrations: Registration[],
): Promise<Service> {
  const svc = await new Svcm(nc).add({
    name: opts.service,
    version: opts.version ?? '0.1.0',
    queue: opts.queue,
    metadata: { instance_id: opts.instanceId },
  });
  const inFlight = opts.inFlight ?? new InFlightRequests();
  const running = new InFlightReplies();
  const link = linkOf(nc);
  const stats = new Map<string, EndpointStats>();
  for (const reg of registrations) {
    const { endpoint } = reg;
    // Service endpoint names must be single subject tokens.
    const name = endpoint.name.replace(/[.*>]/g, '_');
    const endpointStats = new EndpointStats();
    stats.set(name, endpointStats);
    svc.addEndpoint(name, {
      subject: endpoint.subject,
      ...(reg.queue !== undefined ? { queue: reg.queue } : {}),
      handler: (err, msg) => {
        if (err) {
          opts.log.error({ err, subject: endpoint.subject }, 'endpoint subscription failed');
          return;
        }
        // A resend of a request this replica is already running (its receipt was late, not lost):
        // the running handler's heartbeats and reply go to the same inbox; say so and run nothing.
        if (!running.begin(msg.reply)) {
          acknowledge(nc, msg, () => false).stop();
          return;
        }
        inFlight.enter();
        void dispatch(nc, reg, msg, opts.log, endpointStats, link, opts.callers).finally(() => {
          running.done(msg.reply);
          inFlight.leave();
        });
      },
    });
  }
  // $SRV.STATS (answered by the library through `stats()`) reports our timings, not its own.
  const libraryStats = svc.stats.bind(svc);
  svc.stats = async () => {
    const s = await libraryStats();
    return { ...s, endpoints: s.endpoints?.map((e) => ({ ...e, ...stats.get(e.name)?.snapshot() })) };
  };
  const libraryReset = svc.reset.bind(svc);
  svc.reset = () => {
    libraryReset();
    stats.forEach((e) => e.reset());
  };
  // The subscriptions exist once the server has seen them: a request sent right after start-up
  // must not meet "no responders".
  await nc.flush();
  return svc;
}

async function dispatch(
  nc: NatsConnection,
  reg: Registration,
  msg: Msg,
  baseLog: Logger,
  stats: EndpointStats,
  link: NatsLink | undefined,
  callers: readonly string[] | undefined,
): Promise<void> {
  const { endpoint, handler } = reg;
  const started = performance.now();
  const progress = acknowledge(nc, msg, () => !link || link.connected);
  const requestId = msg.headers?.get(Headers.requestId) || randomUUID();
  const budget = Number(msg.headers?.get(Headers.timeout) || Number.NaN);
  const deadline = budget > 0 ? started + budget : undefined;
  const waitsEndBy = budget > 0 ? started + budget - replyReserveMs(budget) : undefined;
  const parent = extractTrace(msg.headers);
  const processSpan = messagingSpanOf('process', msg.subject, subjectTemplate(endpoint));
  let error: { code: string; message: string } | undefined;
  const context: Serving = { requestId, waitsEndBy, active: true };
  await serving
    .run(context, () =>
      inSpan(processSpan.name, { kind: SpanKind.SERVER, parent, attributes: processSpan.attributes }, async (span) => {
        if (span.isRecording()) span.setAttribute('kandev.request_id', requestId);
        const log = baseLog.child({ request_id: requestId, endpoint: endpoint.name });
        const after: Array<() => unknown> = [];
        const afterReply = (fn: () => unknown) => void after.push(fn);
        let reply: Reply<unknown>;
        try {
          try {
            const identity = busIdentityOf(nc);
            const guard = identity ? (payload: unknown) => admit(identity, msg, payload, callers, context, endpoint, log) : undefined;
            reply = await handle(endpoint, handler, msg, { requestId, log, subject: msg.subject, deadline, afterReply }, guard);
          } finally {
            context.active = false;
            progress.stop();
          }
          if (!reply.ok) {
            error = reply.error;
            span.setAttribute('kandev.error_code', reply.error.code);
          }
          // Disconnected (NATS restarting): a reply published now would be dropped at the next reconnect
          // attempt; sent once connected, it reaches a caller that is still waiting on its inbox.
          if (link && !link.connected)
            await link.up(deadline !== undefined ? deadline - performance.now() : (link.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS));
          // No headers: nothing reads them (the caller knows its request id), and building them cost every reply CPU.
          msg.respond(enc.encode(JSON.stringify(reply)));
        } finally {
          runAfterReply(after, log);
        }
      }),
    )
    .catch((e: unknown) => {
      progress.stop();
      error = { code: 'INTERNAL_ERROR', message: 'reply not sent' };
      baseLog.error({ err: e, endpoint: endpoint.name, request_id: requestId }, 'could not answer a request');
    });
  const ms = performance.now() - started;
  stats.record(ms, error);
  metrics.requestDuration.observe({ endpoint: endpoint.name, code: error?.code ?? 'OK' }, ms / 1000);
}

/** The handler's `afterReply` callbacks, in order; a failure of one is logged and does not stop the others. */
function runAfterReply(fns: ReadonlyArray<() => unknown>, log: Logger): void {
  for (const fn of fns) {
    try {
      const out = fn();
      if (out instanceof Promise) out.catch((err: unknown) => log.error({ err }, 'an after-reply step failed'));
    } catch (err) {
      log.error({ err }, 'an after-reply step failed');
    }
  }
}

/**
 * The caller check of a request on a connection with a bus identity (identity.ts, ADR 0055): null
 * when it may run (its gateway assertion, if any, kept for the handler's own requests), else the
 * UNAUTHORIZED answer; a refusal is logged and reported to the identity's listeners (the audit).
 */
async function admit(
  identity: BusIdentity,
  msg: Msg,
  payload: unknown,
  callers: readonly string[] | undefined,
  context: Serving,
  endpoint: Endpoint,
  log: Logger,
): Promise<Reply<unknown> | null> {
  try {
    context.operatorAssertion = (await verifyRequest(identity, msg, payload, callers)).operatorAssertion;
    // When the caller was verified, on the request's span: the step's cost per hop in a trace (bench/src/tails).
    trace.getActiveSpan()?.addEvent('caller.verified');
    return null;
  } catch (e) {
    if (!(e instanceof BusIdentityError)) throw e;
    log.warn({ subject: msg.subject, reason: e.message }, 'request refused: its caller is not verified');
    const actor = (payload as { actor?: unknown } | null)?.actor;
    await identity.refused({
      subject: msg.subject,
      endpoint: endpoint.name,
      requestId: context.requestId,
      caller: e.caller,
      actor,
      payload,
      reason: e.message,
    });
    return { ok: false, error: { code: 'UNAUTHORIZED', message: `caller not verified: ${e.message}` } };
  }
}

/** Parse, validate, check the caller (`guard`), run the handler, validate its reply: the envelope to send back. */
async function handle(
  endpoint: Endpoint,
  handler: Handler<Endpoint>,
  msg: Msg,
  ctx: HandlerContext,
  guard?: (payload: unknown) => Promise<Reply<unknown> | null>,
): Promise<Reply<unknown>> {
  let raw: unknown;
  try {
    raw = msg.data.length ? JSON.parse(dec.decode(msg.data)) : {};
  } catch {
    return { ok: false, error: { code: 'BAD_REQUEST', message: 'request is not valid JSON' } };
  }
  const parsed = endpoint.request.safeParse(raw);
  if (!parsed.success) return { ok: false, error: { code: 'VALIDATION_ERROR', message: 'invalid request', details: zodIssues(parsed.error) } };
  const refused = guard ? await guard(parsed.data) : null;
  if (refused) return refused;
  try {
    const result = await handler(parsed.data, ctx);
    const checked = endpoint.result.safeParse(result);
    if (checked.success) return { ok: true, result: checked.data };
    ctx.log.error({ issues: zodIssues(checked.error) }, 'handler produced a reply that breaks the contract');
    return { ok: false, error: { code: 'INTERNAL_ERROR', message: 'invalid reply' } };
  } catch (e) {
    if (!isKandevError(e) || e.code === 'INTERNAL_ERROR') ctx.log.error({ err: e }, 'endpoint failed');
    return { ok: false, error: toErrorBody(e) };
  }
}

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

/** "No responders", as the client reports it or as `request()` re-throws it (UNAVAILABLE, with the client's error as its cause). */
export function isNoResponders(e: unknown): boolean {
  if (e instanceof NoRespondersError) return true;
  if (e instanceof RequestError) return e.isNoResponders();
  const cause = (e as { cause?: unknown })?.cause;
  return cause !== undefined && cause !== e && isNoResponders(cause);
}
export function isTimeout(e: unknown): boolean {
  return e instanceof TimeoutError || (e as { cause?: unknown })?.cause instanceof TimeoutError;
}
