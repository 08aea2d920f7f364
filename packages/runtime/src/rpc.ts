import { RequestError, TimeoutError, NoRespondersError, type NatsConnection } from '@nats-io/nats-core';
import { SUBJECT_PREFIX, type Endpoint } from '@kandev/contracts';
import type { z } from 'zod';
import type { Logger } from './log.js';
import { linkOf } from './nats.js';
import { serving } from './rpc-context.js';

/*
 * Request/reply on NATS, validated against the contracts both ways: what both sides share (the
 * handler's context, deadlines, error tests). Serving endpoints is rpc-serve.ts, sending requests
 * rpc-request.ts.
 */

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
