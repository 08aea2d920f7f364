import type { NatsConnection, RunningService } from '@kandev/runtime';
import { createTestDatabase, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentNetwork, allowedLoopbackPorts, isLoopbackHost, tableScript } from '../src/isolation/agent-network.js';
import {
  EventLog,
  FakeOrchestrator,
  eventually,
  getExecution,
  launch,
  launchRequest,
  log,
  natsClient,
  startLifecycle,
  stopAt,
  tmpStateDir,
} from './helpers.js';

/*
 * Agents and loopback (ADR 0057): where the restriction is on, an agent's uid reaches the MCP
 * endpoint on this host's loopback and nothing else there: not NATS, not PostgreSQL, not another
 * execution's agentctl. Needs root and nftables (this project's CI machines have both): fails
 * loudly without, rather than passing with nothing checked.
 */

const uidOf = (pid: number): number => Number(/^Uid:\s+(\d+)/m.exec(spawnSync('cat', [`/proc/${pid}/status`], { encoding: 'utf8' }).stdout)![1]);

/** What a TCP connect from `uid` to 127.0.0.1:<port> gets: 'connected' or the error code. */
function connectAs(uid: number, ports: number[]): string[] {
  const code = `
    const net = require('node:net');
    Promise.all(${JSON.stringify(ports)}.map((port) => new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1');
      c.setTimeout(3000, () => { c.destroy(); resolve('timeout'); });
      c.on('connect', () => { c.destroy(); resolve('connected'); });
      c.on('error', (e) => resolve(e.code));
    }))).then((r) => process.stdout.write(JSON.stringify(r)));`;
  const r = spawnSync(process.execPath, ['-e', code], { uid, gid: uid, encoding: 'utf8', cwd: '/' });
  if (r.status !== 0) throw new Error(`probe failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as string[];
}

const portOf = (url: string) => Number(new URL(url).port);

describe('the loopback ports agents may reach (pure)', () => {
  it('the MCP endpoint and the collector when local, DNS, and the extras', () => {
    expect(allowedLoopbackPorts('http://127.0.0.1:8090/mcp', 'http://localhost:4318', [11434])).toEqual([53, 4318, 8090, 11434]);
    expect(allowedLoopbackPorts('http://mcp:8090/mcp', 'http://collector:4318', [])).toEqual([53]);
    expect(allowedLoopbackPorts('http://[::1]/mcp', undefined, [])).toEqual([53, 80]);
    expect(['localhost', '127.0.0.2', '[::1]', '::1'].every(isLoopbackHost)).toBe(true);
    expect(['mcp', '10.0.0.1', 'localhost.evil.com', '0.0.0.0'].some(isLoopbackHost)).toBe(false);
  });

  it("the table filters only loopback packets of the set's uids, accepting replies and the allowed pairs", () => {
    const t = tableScript('kandev_agents_1');
    expect(t).toContain('oifname "lo" meta skuid @uids ct state established,related accept');
    expect(t).toContain('meta skuid . th dport @allowed accept');
    expect(t).toContain('reject with tcp reset');
    expect(t).toContain('policy accept');
  });
});

describe('agents reach only the MCP endpoint on loopback (ADR 0057)', { timeout: 120_000 }, () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let db: TestDatabase;
  let mcp: Server;
  let events: EventLog;
  const stateDirs: string[] = [];
  const running: RunningService[] = [];

  beforeAll(async () => {
    if (process.getuid?.() !== 0) throw new Error('this test needs root: agents get uids of their own, and a packet filter, only then');
    const nft = spawnSync('nft', ['list', 'tables'], { encoding: 'utf8' });
    if (nft.status !== 0) throw new Error(`this test needs nftables (apt-get install nftables): ${nft.stderr || nft.error?.message}`);
    [nats, db] = await Promise.all([startNats(), createTestDatabase()]);
    nc = await natsClient(nats.url, 'agent-network-test');
    await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
    // Stands for the mcp service: the endpoint lifecycle hands to agents.
    mcp = createServer((_, res) => res.end('mcp'));
    await new Promise<void>((r) => mcp.listen(0, '127.0.0.1', r));
  });
  afterAll(async () => {
    for (const r of running) await r.stop();
    mcp?.close();
    await nc?.close();
    await nats?.stop();
    await db?.drop();
    for (const d of stateDirs) rmSync(d, { recursive: true, force: true });
  });

  async function start(instance: string, extra: Record<string, string>): Promise<RunningService> {
    const stateDir = tmpStateDir();
    stateDirs.push(stateDir);
    const life = await startLifecycle(nats.url, instance, stateDir, extra);
    running.push(life);
    return life;
  }

  it('restricted: NATS, PostgreSQL and another agentctl refused from an agent uid; the MCP endpoint reached; lifecycle still drives its agentctl', async () => {
    const mcpPort = (mcp.address() as AddressInfo).port;
    const life = await start('life-net-1', { MCP_PUBLIC_URL: `http://127.0.0.1:${mcpPort}/mcp` });
    const ready = (await (await fetch(`${life.healthUrl}/readyz`)).json()) as { details: Record<string, unknown> };
    expect(ready.details).toMatchObject({ agent_network: 'loopback_restricted', agent_isolation: 'uid_per_execution' });

    const [a, b] = await Promise.all([launch(nc, launchRequest()), launch(nc, launchRequest())]);
    const urlB = (await eventually(
      () => getExecution(nc, b.execution_id),
      (r) => r?.agentctl_url != null,
    ))!.agentctl_url!;
    const targets = [portOf(nats.url), portOf(db.url), portOf(urlB), mcpPort];
    expect(connectAs(uidOf(a.pid!), targets)).toEqual(['ECONNREFUSED', 'ECONNREFUSED', 'ECONNREFUSED', 'connected']);
    // The same ports from a uid outside the range: all reachable (the filter is the agents' alone).
    expect(connectAs(65_534, targets)).toEqual(['connected', 'connected', 'connected', 'connected']);

    // lifecycle's requests to an agentctl (replies from the agent's uid) pass: the stop is answered.
    for (const x of [a, b]) await stopAt(nc, 'life-net-1', { execution_id: x.execution_id, reason: 'test' });
    for (const x of [a, b]) await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id);
    // Finished: the uid's filter is lifted with it (the next holder of the uid gets its own).
    running.splice(running.indexOf(life), 1);
    await life.stop();
  });

  it('restricts and releases uids in batches (one nft at a time); a release of a uid never restricted is no error; the table goes at close', async () => {
    const net = await AgentNetwork.open({ setting: 'auto', isolated: true, ports: [8090], log });
    expect(net.mode).toBe('loopback_restricted');
    const uids = Array.from({ length: 12 }, (_, i) => 29_900 + i);
    await Promise.all(uids.map((u) => net.restrict(u)));
    const table = `kandev_agents_${process.pid}`;
    const listed = () => spawnSync('nft', ['list', 'set', 'inet', table, 'uids'], { encoding: 'utf8' }).stdout;
    for (const u of uids) expect(listed()).toContain(String(u));
    await Promise.all([...uids, 29_899].map((u) => net.release(u)));
    for (const u of uids) expect(listed()).not.toContain(String(u));
    await net.close();
    // Other instances of this process (the lifecycle of the other tests) may still use the table.
    const users = running.length;
    expect(spawnSync('nft', ['list', 'tables'], { encoding: 'utf8' }).stdout.includes(table)).toBe(users > 0);
  });

  it('AGENT_NETWORK=off: unrestricted, and /readyz says so', async () => {
    const life = await start('life-net-2', { AGENT_NETWORK: 'off' });
    const ready = (await (await fetch(`${life.healthUrl}/readyz`)).json()) as { details: Record<string, unknown> };
    expect(ready.details).toMatchObject({ agent_network: 'unrestricted' });
    const x = await launch(nc, launchRequest());
    expect(connectAs(uidOf(x.pid!), [portOf(nats.url)])).toEqual(['connected']);
    await stopAt(nc, 'life-net-2', { execution_id: x.execution_id, reason: 'test' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id);
  });
});
