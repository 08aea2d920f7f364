import { httpStatusOf, isKandevError, retryAfterOf, type ErrorBody, type ErrorCode } from '@kandev/contracts';

/**
 * Largest JSON body the gateway reads (docs/limits.md). Chosen below the NATS max payload (1 MiB
 * by default): the request the gateway forwards is the validated body (unknown keys dropped) plus
 * the actor, never bigger than the body itself by more than a few hundred bytes, so an accepted body
 * can always be sent. It still admits the largest valid prompt (100,000 characters, up to 300 KB
 * of UTF-8).
 */
export const BODY_LIMIT_BYTES = 512 * 1024;
/**
 * A body refused as too large by its declared length is still read (and dropped) up to this size,
 * so the caller can finish sending it and read the 400. Fastify closes the connection on every
 * refused body, and the caller's remaining bytes then meet a closed socket: it may see EPIPE or a
 * reset instead of the answer (an e2e test saw `fetch failed: write EPIPE` for a 1 MB prompt under
 * load). Beyond this size, reading the rest costs more than a caller's lost answer; it is closed.
 */
export const OVERSIZE_BODY_DRAIN_BYTES = 8 * 1024 * 1024;
/** Largest header section Node's HTTP parser accepts (its default); beyond it, clientErrorResponse. */
export const MAX_HEADER_BYTES = 16 * 1024;

export interface ErrorResponse {
  status: number;
  body: { error: ErrorBody };
  /** True when the failure is ours (5xx that is not a downstream's answer) and deserves an error log. */
  unexpected: boolean;
  /** Seconds for a `Retry-After` header (a 503 refused for load), else null. */
  retryAfterS: number | null;
}

const respond = (code: ErrorCode, message: string, details?: Record<string, unknown>, unexpected = false): ErrorResponse => ({
  status: httpStatusOf(code),
  body: { error: details ? { code, message, details } : { code, message } },
  unexpected,
  retryAfterS: retryAfterOf({ code, details }),
});

interface FrameworkError {
  code?: unknown;
  statusCode?: unknown;
  validation?: unknown;
  message?: unknown;
}

/**
 * Any failure on the HTTP surface → the status and body of its error code. KandevErrors (ours, or a service's
 * answer carried back by `request`) keep their code; Fastify's own errors are folded into the
 * closed set, so no response ever has Fastify's default `{statusCode, error, message}` shape.
 */
export function errorResponseOf(err: unknown): ErrorResponse {
  if (isKandevError(err)) return respond(err.code, err.message, err.details);
  const e = (typeof err === 'object' && err !== null ? err : {}) as FrameworkError;
  const fst = typeof e.code === 'string' ? e.code : '';
  if (e.validation) return respond('VALIDATION_ERROR', 'invalid request', { issues: e.validation });
  switch (fst) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return respond('BAD_REQUEST', 'request body is not valid JSON');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return respond('BAD_REQUEST', 'request body must be application/json');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return respond('BAD_REQUEST', 'request body is too large', { limit_bytes: BODY_LIMIT_BYTES });
    case 'FST_ERR_NOT_FOUND':
      return respond('NOT_FOUND', 'not found');
  }
  const status = typeof e.statusCode === 'number' ? e.statusCode : 500;
  if (status >= 400 && status < 500) return respond('BAD_REQUEST', typeof e.message === 'string' && e.message ? e.message : 'bad request');
  return respond('INTERNAL_ERROR', 'internal error', undefined, true);
}

/**
 * Whether a refused request's connection stays open so that Node reads and drops the rest of its
 * body (it does so for any response that does not close the connection): only a body refused by
 * its declared Content-Length, before any of it was read, and no larger than
 * OVERSIZE_BODY_DRAIN_BYTES. A body refused part-way (no length declared) has a half-read stream
 * that cannot carry another request, so Fastify's close stands.
 */
export function drainsRefusedBody(err: unknown, contentLength: string | undefined): boolean {
  if ((err as { code?: unknown } | null)?.code !== 'FST_ERR_CTP_BODY_TOO_LARGE' || contentLength === undefined || !/^\d+$/.test(contentLength)) return false;
  const length = Number(contentLength);
  return length > BODY_LIMIT_BYTES && length <= OVERSIZE_BODY_DRAIN_BYTES;
}

/**
 * A raw HTTP response for a request Node's parser refused before Fastify saw it (oversized
 * headers, malformed request line): the error body instead of Fastify's own, and the connection is
 * closed since the rest of the stream cannot be trusted.
 */
export function clientErrorResponse(err: { code?: unknown }): string {
  const message = err.code === 'HPE_HEADER_OVERFLOW' ? 'request headers are too large' : 'malformed request';
  const details = err.code === 'HPE_HEADER_OVERFLOW' ? { limit_bytes: MAX_HEADER_BYTES } : undefined;
  const body = JSON.stringify(respond('BAD_REQUEST', message, details).body);
  return `HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}
