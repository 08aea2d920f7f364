import { token, tokenRefused } from './auth';
import { plainWords } from './model';

/** Fastify's (and the gateway's) answer for a path it has no route for. */
export const ROUTE_MISSING = /^(no route|Route) /i;

/** An API failure in the SPEC's error shape, plus the words an operator reads. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly serverMessage: string,
    readonly path: string,
  ) {
    super(plainWords(status, code, serverMessage, path));
  }
  /** The route itself is missing on this gateway (older server), not the thing asked for. */
  get routeMissing(): boolean {
    return this.status === 404 && ROUTE_MISSING.test(this.serverMessage);
  }
}

/** The gateway is the page's own origin: the console is served by it at /ui/. */
export async function api<T>(method: string, path: string, body?: unknown, extraHeaders: Record<string, string> = {}, t = token.get()): Promise<T> {
  const headers: Record<string, string> = { ...extraHeaders };
  if (t) headers.authorization = `Bearer ${t}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    throw new ApiError(0, 'NETWORK', 'network error', path);
  }
  const text = await res.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!res.ok) {
    const err = json?.error ?? {};
    // Only the token this tab signed in with signs every tab out (not one being tried at the sign-in form).
    if (res.status === 401 && t !== null && t === token.get()) tokenRefused();
    throw new ApiError(res.status, String(err.code ?? `HTTP_${res.status}`), String(err.message ?? res.statusText), path);
  }
  return json as T;
}

export const get = <T>(path: string) => api<T>('GET', path);
export const post = <T>(path: string, body: unknown = {}) => api<T>('POST', path, body);
export const del = <T>(path: string) => api<T>('DELETE', path);
/**
 * A create the server may have done though the answer was lost (a session start launches an agent):
 * sent with an Idempotency-Key, so the operator's second click answers the first session (B-7).
 */
export const postOnce = <T>(path: string, body: unknown, key: string) => api<T>('POST', path, body, { 'idempotency-key': key });
export const newKey = () => (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`);

export const qs = (params: Record<string, string | number | boolean | null | undefined>) => {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') u.set(k, String(v));
  const s = u.toString();
  return s ? `?${s}` : '';
};
