import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { trace } from '@opentelemetry/api';
import { Svcm, type Service } from '@nats-io/services';
import { Headers, isKandevError, type Endpoint, type Reply } from '@kandev/contracts';
import { randomUUID } from 'node:crypto';
import type { Logger } from './log.js';
import { SpanKind, extractTrace, inSpan } from './tracing.js';
import { messagingSpanOf } from './semconv.js';
import { metrics } from './metrics.js';
import { linkOf, type NatsLink } from './nats.js';
import { BusIdentityError, busIdentityOf, verifyRequest, type BusIdentity } from './identity.js';
import { acknowledge, InFlightReplies } from './replies.js';
import { DEFAULT_REQUEST_TIMEOUT_MS, replyReserveMs, subjectTemplate, type Handler, type HandlerContext, type Registration } from './rpc.js';
import { serving, zodIssues, type Serving } from './rpc-context.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

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
