import { z } from 'zod';

/** The closed set of error codes (docs/requirements.md). */
export const ErrorCode = z.enum([
  'BAD_REQUEST',
  'VALIDATION_ERROR',
  'UNAUTHORIZED',
  'FORBIDDEN',
  'NOT_FOUND',
  'CONFLICT',
  'INTERNAL_ERROR',
  'UNAVAILABLE',
  'UNKNOWN_ACTION',
  'RATE_LIMITED',
]);
export type ErrorCode = z.infer<typeof ErrorCode>;

/** HTTP status per code; exhaustive so a new code cannot go unmapped. */
export function httpStatusOf(code: ErrorCode): number {
  switch (code) {
    case 'BAD_REQUEST':
    case 'VALIDATION_ERROR':
    case 'UNKNOWN_ACTION':
      return 400;
    case 'UNAUTHORIZED':
      return 401;
    case 'FORBIDDEN':
      return 403;
    case 'NOT_FOUND':
      return 404;
    case 'CONFLICT':
      return 409;
    case 'INTERNAL_ERROR':
      return 500;
    case 'UNAVAILABLE':
      return 503;
    case 'RATE_LIMITED':
      return 429;
  }
}

export const ErrorBody = z.object({
  code: ErrorCode,
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
});
export type ErrorBody = z.infer<typeof ErrorBody>;

/** A failure that crosses the wire with its error code. Throw it from domain or endpoint code. */
export class KandevError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;
  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'KandevError';
    this.code = code;
    this.details = details;
  }
  toBody(): ErrorBody {
    return this.details ? { code: this.code, message: this.message, details: this.details } : { code: this.code, message: this.message };
  }
  static from(body: ErrorBody): KandevError {
    return new KandevError(body.code, body.message, body.details);
  }
}

export const isKandevError = (e: unknown): e is KandevError => e instanceof KandevError;

export const badRequest = (m: string, d?: Record<string, unknown>) => new KandevError('BAD_REQUEST', m, d);
export const validationError = (m: string, d?: Record<string, unknown>) => new KandevError('VALIDATION_ERROR', m, d);
export const unauthorized = (m = 'missing or invalid token') => new KandevError('UNAUTHORIZED', m);
export const forbidden = (m: string, d?: Record<string, unknown>) => new KandevError('FORBIDDEN', m, d);
export const notFound = (m: string, d?: Record<string, unknown>) => new KandevError('NOT_FOUND', m, d);
export const conflict = (m: string, d?: Record<string, unknown>) => new KandevError('CONFLICT', m, d);
export const internalError = (m: string, cause?: unknown) => new KandevError('INTERNAL_ERROR', m, undefined, { cause });
export const unavailable = (m: string, cause?: unknown) => new KandevError('UNAVAILABLE', m, undefined, { cause });
/**
 * UNAVAILABLE because of load, refused at once: `details.retry_after_s` says when to try again (the
 * gateway turns it into a `Retry-After` header; the body keeps the error shape).
 */
export const overloaded = (m: string, retryAfterS: number, d?: Record<string, unknown>) =>
  new KandevError('UNAVAILABLE', m, { ...d, retry_after_s: Math.max(1, Math.ceil(retryAfterS)) });
/** too many requests from one token (429); `details.retry_after_s` becomes `Retry-After`. */
export const rateLimited = (m: string, retryAfterS: number, d?: Record<string, unknown>) =>
  new KandevError('RATE_LIMITED', m, { ...d, retry_after_s: Math.max(1, Math.ceil(retryAfterS)) });
/** The `Retry-After` seconds an error carries, if any. */
export function retryAfterOf(e: { code: ErrorCode; details?: Record<string, unknown> | undefined }): number | null {
  const v = e.details?.retry_after_s;
  return (e.code === 'UNAVAILABLE' || e.code === 'RATE_LIMITED') && typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.ceil(v) : null;
}
