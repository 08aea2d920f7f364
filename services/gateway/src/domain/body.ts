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

/**
 * Deepest nesting of arrays and objects a JSON body or `/ws` frame may have (docs/limits.md). No
 * request of the API needs more than a handful of levels; free-form fields (a wakeup's `payload`)
 * get 64, far above any real use and far below what recursion anywhere behind (JSON.stringify,
 * zod, the PostgreSQL driver's jsonb encoding) overflows at (thousands of levels).
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Whether the JSON text nests arrays/objects deeper than `max`, found by one pass over the text
 * before it is parsed (so parsing and everything after only ever see bounded depth). Brackets inside
 * strings do not count; the scan does not validate the JSON (the parser does that next).
 */
export function jsonNestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > max) return true;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) depth--;
  }
  return false;
}

/** The BAD_REQUEST for a body or frame nested deeper than MAX_JSON_DEPTH, or null. */
export function depthError(text: string, what: string): KandevError | null {
  return jsonNestsDeeperThan(text, MAX_JSON_DEPTH)
    ? badRequest(`${what} nests arrays/objects deeper than ${MAX_JSON_DEPTH} levels`, { max_depth: MAX_JSON_DEPTH })
    : null;
}

/**
 * Header values as the gateway's other inputs: Node hands them over as latin1 (one char per
 * byte), so a value holding bytes >= 0x80 is re-read as UTF-8, strictly. The name of the first
 * header that is not UTF-8 (or holds NUL / C0 controls other than tab, which Node's parser already
 * refuses on the wire), else null.
 */
export function invalidHeader(headers: Record<string, string | string[] | undefined>): string | null {
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) if (headerText(v) === null) return name;
  }
  return null;
}

/** A header value as text: decoded from UTF-8 when it has non-ASCII bytes; null when it is not UTF-8 or holds control characters. */
export function headerText(value: string): string | null {
  if (/[\u0000-\u0008\u000a-\u001f\u007f]/.test(value)) return null;
  if (/^[\u0000-\u007f]*$/.test(value)) return value;
  if (/[^\u0000-\u00ff]/.test(value)) return value; // already decoded text (not from the wire): keep it
  try {
    return utf8.decode(Buffer.from(value, 'latin1'));
  } catch {
    return null;
  }
}
