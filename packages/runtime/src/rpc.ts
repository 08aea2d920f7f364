import { headers as natsHeaders, RequestError, TimeoutError, NoRespondersError, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/nats-core';
import { Svcm, type Service } from '@nats-io/services';
import { Headers, KandevError, internalError, isKandevError, replyEnvelope, unavailable, validationError, type Endpoint } from '@kandev/contracts';
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import type { Logger } from './log.js';
import { SpanKind, extractTrace, inSpan, injectTrace } from './tracing.js';
import { metrics } from './metrics.js';

const enc = new TextEncoder();
/** Room left in the server's max payload for the message's headers (request id, trace context). */
const HEADER_ALLOWANCE = 4 * 1024;
const dec = new TextDecoder();

export interface HandlerContext {
  requestId: string;
  log: Logger;
  /** Headers to forward on onward calls, so request id and trace follow the work. */
  subject: string;
}
export type Handler<E extends Endpoint> = (req: z.infer<E['request']>, ctx: HandlerContext) => Promise<z.infer<E['result']>>;

export interface Registration<E extends Endpoint = Endpoint> {
  endpoint: E;
  handler: Handler<E>;
  /**
   * Queue group; default the service's. (@nats-io/services falls back to the service's group for
   * an empty string, so instance-routed endpoints rely on their subject being unique instead.)
   */
  queue?: string;
}
/** Helper that keeps the endpoint and handler types tied together. */
export const on = <E extends Endpoint>(endpoint: E, handler: Handler<E>, queue?: string): Registration<E> =>
  queue === undefined ? { endpoint, handler } : { endpoint, handler, queue };

const zodIssues = (e: z.ZodError) => ({ issues: e.issues.map((i) => ({ path: i.path.join('.'), message: i.message })) });

function toErrorBody(e: unknown) {
  if (isKandevError(e)) return e.toBody();
  return { code: 'INTERNAL_ERROR' as const, message: 'internal error' };
}

/**
 * Register endpoints as one @nats-io/services service (so $SRV.PING/INFO/STATS work), each in the
 * service's queue group. Requests and replies are validated against the contracts on the way in
 * and out; a handler throwing KandevError answers with its code, anything else INTERNAL_ERROR.
 */
export async function serveEndpoints(
  nc: NatsConnection,
  opts: { service: string; version?: string; instanceId: string; queue: string; log: Logger },
  registrations: Registration[],
): Promise<Service> {
  const svc = await new Svcm(nc).add({
    name: opts.service,
    version: opts.version ?? '0.1.0',
    queue: opts.queue,
    metadata: { instance_id: opts.instanceId },
  });
  for (const reg of registrations) {
    const { endpoint } = reg;
    // Service endpoint names must be single subject tokens.
    const name = endpoint.name.replace(/[.*>]/g, '_');
    svc.addEndpoint(name, {
      subject: endpoint.subject,
      ...(reg.queue !== undefined ? { queue: reg.queue } : {}),
      handler: (err, msg) => {
        if (err) {
          opts.log.error({ err, subject: endpoint.subject }, 'endpoint subscription failed');
          return;
        }
        void dispatch(reg, msg, opts.log);
      },
    });
  }
  // The subscriptions exist once the server has seen them: a request sent right after start-up
  // must not meet "no responders".
  await nc.flush();
  return svc;
}

let inFlight = 0;
const idleWaiters: Array<() => void> = [];
/** Resolves once no request handler is running (shutdown waits on it before draining NATS). */
export function requestsSettled(): Promise<void> {
  return inFlight === 0 ? Promise.resolve() : new Promise((r) => idleWaiters.push(r));
}

async function dispatch(reg: Registration, msg: Msg, baseLog: Logger): Promise<void> {
  inFlight++;
  try {
    await dispatchOne(reg, msg, baseLog);
  } finally {
    inFlight--;
    if (inFlight === 0) idleWaiters.splice(0).forEach((r) => r());
  }
}

async function dispatchOne(reg: Registration, msg: Msg, baseLog: Logger): Promise<void> {
  const { endpoint, handler } = reg;
  const requestId = msg.headers?.get(Headers.requestId) || randomUUID();
  const parent = extractTrace(msg.headers);
  const started = performance.now();
  let code = 'OK';
  await inSpan(`process ${endpoint.subject.replace(/\.[0-9a-f-]{8,}\./i, '.*.')}`, { kind: SpanKind.SERVER, parent, attributes: { 'messaging.system': 'nats', 'messaging.destination.name': endpoint.name, 'kandev.request_id': requestId } }, async (span) => {
    const log = baseLog.child({ request_id: requestId, endpoint: endpoint.name });
    let reply: unknown;
    let raw: unknown;
    try {
      raw = msg.data.length ? JSON.parse(dec.decode(msg.data)) : {};
    } catch {
      reply = { ok: false, error: { code: 'BAD_REQUEST', message: 'request is not valid JSON' } };
    }
    if (reply === undefined) {
      const parsed = endpoint.request.safeParse(raw);
      if (!parsed.success) {
        reply = { ok: false, error: { code: 'VALIDATION_ERROR', message: 'invalid request', details: zodIssues(parsed.error) } };
      } else {
        try {
          const result = await handler(parsed.data, { requestId, log, subject: msg.subject });
          const checked = endpoint.result.safeParse(result);
          if (checked.success) reply = { ok: true, result: checked.data };
          else {
            log.error({ issues: zodIssues(checked.error) }, 'handler produced a reply that breaks the contract');
            reply = { ok: false, error: { code: 'INTERNAL_ERROR', message: 'invalid reply' } };
          }
        } catch (e) {
          if (!isKandevError(e) || e.code === 'INTERNAL_ERROR') log.error({ err: e }, 'endpoint failed');
          reply = { ok: false, error: toErrorBody(e) };
        }
      }
    }
    const r = reply as { ok: boolean; error?: { code: string } };
    if (!r.ok) {
      code = r.error?.code ?? 'INTERNAL_ERROR';
      span.setAttribute('kandev.error_code', code);
    }
    const h = natsHeaders();
    h.set(Headers.requestId, requestId);
    msg.respond(enc.encode(JSON.stringify(reply)), { headers: h });
  });
  metrics.requestDuration.observe({ endpoint: endpoint.name, code }, (performance.now() - started) / 1000);
}

export interface RequestOptions {
  timeoutMs?: number;
  requestId?: string;
}

/**
 * Send a typed request. The payload is validated before it leaves; the reply is validated when
 * it arrives. Errors come back as KandevError; no responders or a timeout become UNAVAILABLE.
 */
export async function request<E extends Endpoint>(
  nc: NatsConnection,
  endpoint: E,
  payload: z.input<E['request']>,
  opts: RequestOptions = {},
): Promise<z.infer<E['result']>> {
  const parsed = endpoint.request.safeParse(payload);
  if (!parsed.success) throw validationError(`invalid request for ${endpoint.name}`, zodIssues(parsed.error));
  return inSpan(`send ${endpoint.subject}`, { kind: SpanKind.CLIENT, attributes: { 'messaging.system': 'nats', 'messaging.destination.name': endpoint.name } }, async () => {
    const h: MsgHdrs = natsHeaders();
    if (opts.requestId) h.set(Headers.requestId, opts.requestId);
    injectTrace(h);
    const data = enc.encode(JSON.stringify(parsed.data));
    // The contracts bound every field so this cannot happen for a valid request; should it ever,
    // it is the caller's input that is too big (VALIDATION_ERROR), not a retryable outage.
    const maxPayload = nc.info?.max_payload;
    if (maxPayload && data.length > maxPayload - HEADER_ALLOWANCE) throw validationError(`request for ${endpoint.name} is too large`, { bytes: data.length, limit: maxPayload - HEADER_ALLOWANCE });
    let msg: Msg;
    try {
      msg = await nc.request(endpoint.subject, data, { timeout: opts.timeoutMs ?? 5_000, headers: h });
    } catch (e) {
      if (isNoResponders(e)) throw unavailable(`no ${endpoint.name} responder`, e);
      if (isTimeout(e)) throw unavailable(`${endpoint.name} timed out`, e);
      throw unavailable(`${endpoint.name} failed: ${(e as Error).message}`, e);
    }
    let body: unknown;
    try {
      body = JSON.parse(dec.decode(msg.data));
    } catch (e) {
      throw internalError(`reply of ${endpoint.name} is not JSON`, e);
    }
    const env = replyEnvelope(endpoint.result).safeParse(body);
    if (!env.success) throw new KandevError('INTERNAL_ERROR', `invalid reply from ${endpoint.name}`, zodIssues(env.error));
    if (!env.data.ok) throw KandevError.from(env.data.error);
    return env.data.result as z.infer<E['result']>;
  });
}

export function isNoResponders(e: unknown): boolean {
  if (e instanceof NoRespondersError) return true;
  if (e instanceof RequestError) return e.isNoResponders();
  return (e as { cause?: unknown })?.cause instanceof NoRespondersError;
}
export function isTimeout(e: unknown): boolean {
  return e instanceof TimeoutError || (e as { cause?: unknown })?.cause instanceof TimeoutError;
}
