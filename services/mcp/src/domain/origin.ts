/**
 * DNS-rebinding protection of the MCP endpoint (SPEC, INTERFACES "MCP transport rules"; MCP
 * 2025-11-25, Basic › Transports › Streamable HTTP › Security Warning: servers MUST validate the
 * `Origin` header and SHOULD bind to localhost). A browser page on another site that gets its
 * name resolved to 127.0.0.1 can make requests to the MCP port; the browser then sends that
 * page's `Origin` (and its own host name as `Host`), which these rules refuse. Agents are not
 * browsers and send neither an `Origin` nor a foreign `Host`.
 *
 * - `Origin` present and not allowed → 403. Allowed: `MCP_ALLOWED_ORIGINS` (comma list of exact
 *   origins, `scheme://host[:port]`), or by default the loopback origins of the MCP port itself
 *   (`http(s)://localhost|127.0.0.1|[::1]:<port>`). A request without `Origin` passes this rule.
 * - `Host` not allowed → 403. With `MCP_ALLOWED_HOSTS` (comma list; `name` allows any port,
 *   `name:port` that port only) exactly those; without it, when the endpoint listens on a loopback
 *   address, only loopback names (the rebinding case: a foreign name pointing at 127.0.0.1);
 *   otherwise (a pod behind a Service, reached by any name) unchecked.
 */
export interface OriginPolicy {
  /** Lower-cased exact origins. */
  origins: ReadonlySet<string>;
  /** Lower-cased `name` or `name:port` entries; null = Host unchecked. */
  hosts: ReadonlySet<string> | null;
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

export const isLoopbackBind = (host: string) => host === 'localhost' || host === '::1' || host === '[::1]' || /^127\./.test(host);

const list = (v: string) =>
  v
    .split(',')
    .map((s) => s.trim().toLowerCase().replace(/\/+$/, ''))
    .filter(Boolean);

export function originPolicy(opts: { allowedOrigins?: string | undefined; allowedHosts?: string | undefined; bindHost: string; port: number }): OriginPolicy {
  const origins =
    opts.allowedOrigins !== undefined
      ? new Set(list(opts.allowedOrigins))
      : new Set(LOOPBACK_NAMES.flatMap((h) => [`http://${h}:${opts.port}`, `https://${h}:${opts.port}`]));
  const hosts = opts.allowedHosts !== undefined ? new Set(list(opts.allowedHosts)) : isLoopbackBind(opts.bindHost) ? new Set(LOOPBACK_NAMES) : null;
  return { origins, hosts };
}

/** `name` of `name:port` (an IPv6 literal keeps its brackets). */
function hostName(host: string): string {
  if (host.startsWith('[')) return host.slice(0, host.indexOf(']') + 1);
  const i = host.lastIndexOf(':');
  return i === -1 ? host : host.slice(0, i);
}

/** Why this request is refused (403), or null. */
export function originRefusal(policy: OriginPolicy, headers: { origin?: string | string[] | undefined; host?: string | string[] | undefined }): string | null {
  const origin = Array.isArray(headers.origin) ? headers.origin[0] : headers.origin;
  if (origin !== undefined && !policy.origins.has(origin.trim().toLowerCase().replace(/\/+$/, ''))) return 'Origin not allowed';
  if (policy.hosts) {
    const host = (Array.isArray(headers.host) ? headers.host[0] : headers.host)?.trim().toLowerCase();
    if (!host || !(policy.hosts.has(host) || policy.hosts.has(hostName(host)))) return 'Host not allowed';
  }
  return null;
}
