import { randomUUID } from 'node:crypto';

const ACCEPTABLE = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

/**
 * The request id of an incoming call: the caller's `x-request-id` when it is a sane token (it ends
 * up in logs, audit rows and NATS headers, so nothing unbounded or with control characters), else a
 * fresh UUID.
 */
export function requestIdFrom(header: string | string[] | undefined): string {
  const v = Array.isArray(header) ? header[0] : header;
  return v !== undefined && ACCEPTABLE.test(v) ? v : randomUUID();
}
