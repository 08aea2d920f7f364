import { readFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';

/**
 * Whether something accepts TCP connections at host:port within `timeoutMs`.
 * @param {string} host
 * @param {number} port
 * @returns {Promise<boolean>}
 */
export function canConnect(host, port, timeoutMs = 500) {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    /** @param {boolean} ok */
    const done = (ok) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * Whether `port` can be bound on `host` right now.
 * @param {number} port
 * @returns {Promise<boolean>}
 */
export function portFree(port, host = '127.0.0.1') {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}

/**
 * A port that was free a moment ago (the OS picks it).
 * @returns {Promise<number>}
 */
export function freePort(host = '127.0.0.1') {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const { port } = /** @type {import("node:net").AddressInfo} */ (srv.address());
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Ports the Fetch standard blocks ("bad ports"): browsers and Node's fetch refuse to connect to
 * them, so a console, an MCP client or a test could not reach a service listening on one. A CI run
 * lost a test to the MCP service on one of them (10080).
 */
export const FETCH_BLOCKED_PORTS = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137,
  139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049,
  3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);

/**
 * A free port for a server that binds it later (or again, after a restart): picked below the
 * kernel's ephemeral range, which is where a port a moment ago free would otherwise be handed to
 * the next `listen(0)` or outgoing connection on this host before our server binds it (EADDRINUSE).
 * Never one that fetch refuses (FETCH_BLOCKED_PORTS). `random` is for tests.
 */
export async function stablePort(host = '127.0.0.1', random = Math.random) {
  let ephemeralStart = 32768;
  try {
    ephemeralStart = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || ephemeralStart;
  } catch {
    /* not Linux: the common default */
  }
  const low = 10_000;
  if (ephemeralStart - low < 1_000) return freePort(host);
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = low + Math.floor(random() * (ephemeralStart - low));
    if (!FETCH_BLOCKED_PORTS.has(port) && (await portFree(port, host))) return port;
  }
  return freePort(host);
}

/**
 * host and port of the first server in a NATS URL list (`nats://a:4222,nats://b:4222`).
 * @param {string} url
 */
export function firstNatsServer(url) {
  const first = (url.split(',')[0] ?? '').trim();
  const u = new URL(/^[a-z]+:\/\//i.test(first) ? first : `nats://${first}`);
  return { host: u.hostname || '127.0.0.1', port: Number(u.port || 4222) };
}

/**
 * A URL with its password masked, for printing.
 * @param {string} url
 */
export function maskUrl(url) {
  try {
    const u = new URL(url);
    if (u.password) u.password = '****';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}
