// scripts/lib/net.mjs: the ports `npm start` picks for its services.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../src/paths.js';

interface NetLib {
  FETCH_BLOCKED_PORTS: Set<number>;
  stablePort(host?: string, random?: () => number): Promise<number>;
}
const net = (): Promise<NetLib> => import(pathToFileURL(join(repoRoot, 'scripts/lib/net.mjs')).href) as Promise<NetLib>;

describe('stablePort', () => {
  it('never picks a port that fetch refuses to connect to', async () => {
    const { stablePort } = await net();
    const ephemeralStart = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    const span = ephemeralStart - 10_000;
    // The first draw lands on 10080 (blocked, and free on this machine), the next on 10081.
    let drawn = 0;
    const port = await stablePort('127.0.0.1', () => [80.5 / span, 81.5 / span][drawn++] ?? Math.random());
    expect(port).not.toBe(10_080);
    expect(drawn).toBeGreaterThanOrEqual(2);
  });

  it('lists exactly ports that Node fetch refuses as bad', async () => {
    const { FETCH_BLOCKED_PORTS } = await net();
    for (const port of FETCH_BLOCKED_PORTS) {
      const cause = await fetch(`http://127.0.0.1:${port}/`).then(
        () => 'connected',
        (e: Error & { cause?: Error }) => e.cause?.message,
      );
      expect(cause, `port ${port}`).toBe('bad port');
    }
    // and a port next to one is not refused as bad (nothing listens on it: a plain connection error)
    const cause = await fetch('http://127.0.0.1:10079/').then(
      () => 'connected',
      (e: Error & { cause?: Error }) => e.cause?.message,
    );
    expect(cause).not.toBe('bad port');
  });
});
