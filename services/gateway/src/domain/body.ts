import { badRequest, type KandevError } from '@kandev/contracts';

/** Refuses bytes that are not UTF-8 instead of decoding them into U+FFFD. */
const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A JSON body's text, or the BAD_REQUEST that refuses it (SPEC: a malformed body is BAD_REQUEST).
 * JSON is UTF-8 (RFC 8259 §8.1): a `charset` parameter other than utf-8 is refused, whatever the
 * bytes, and bytes that are not UTF-8 are refused whatever the header says. A leading BOM is
 * dropped (TextDecoder's default), as JSON parsers may.
 */
export function decodeJsonBody(contentType: string | undefined, body: Buffer | string): string | KandevError {
  const charset = /;\s*charset\s*=\s*"?([^";\s]*)"?/i.exec(contentType ?? '')?.[1];
  if (charset !== undefined && !/^utf-?8$/i.test(charset))
    return badRequest('request body must be UTF-8 JSON (charset=utf-8)', { charset: charset.slice(0, 40) });
  if (typeof body === 'string') return body;
  try {
    return utf8.decode(body);
  } catch {
    return badRequest('request body is not valid UTF-8');
  }
}
