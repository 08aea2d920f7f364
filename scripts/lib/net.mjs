import { readFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';

/** Whether something accepts TCP connections at host:port within `timeoutMs`. */
export function canConnect(host, port, timeoutMs = 500) {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
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

/** Whether `port` can be bound on `host` right now. */
export function portFree(port, host = '127.0.0.1') {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}

/** A port that was free a moment ago (the OS picks it). */
export function freePort(host = '127.0.0.1') {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * A free port for a server that binds it later (or again, after a restart): picked below the
 * kernel's ephemeral range, which is where a port a moment ago free would otherwise be handed to
 * the next `listen(0)` or outgoing connection on this host before our server binds it (EADDRINUSE).
 */
export async function stablePort(host = '127.0.0.1') {
  let ephemeralStart = 32768;
  try {
    ephemeralStart = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || ephemeralStart;
  } catch {
    /* not Linux: the common default */
  }
  const low = 10_000;
  if (ephemeralStart - low < 1_000) return freePort(host);
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = low + Math.floor(Math.random() * (ephemeralStart - low));
    if (await portFree(port, host)) return port;
  }
  return freePort(host);
}

/** host and port of the first server in a NATS URL list (`nats://a:4222,nats://b:4222`). */
export function firstNatsServer(url) {
  const first = url.split(',')[0].trim();
  const u = new URL(/^[a-z]+:\/\//i.test(first) ? first : `nats://${first}`);
  return { host: u.hostname || '127.0.0.1', port: Number(u.port || 4222) };
}
