import type { Logger } from '@kandev/runtime';
import { spawn } from 'node:child_process';

/*
 * Agents and loopback (ADR 0057). An agent shares the host's (pod's) loopback with the control
 * plane: NATS, PostgreSQL, every service's health and metrics port and every other agentctl listen
 * there. Where this service may (root, nftables usable), each execution's uid is put in an
 * nftables set while it runs: a packet to a local address (it leaves through `lo`) from a socket of
 * that uid is accepted only on an allowed port (the MCP endpoint, DNS, the trace collector, and
 * AGENT_LOOPBACK_PORTS) or as part of a connection someone else opened (lifecycle's requests to its
 * agentctl); anything else is rejected. The outside world is untouched. One table per instance
 * (`kandev_agents_<pid>`): a uid is held by one instance of the host at a time (the uid locks), so
 * no two tables ever restrict the same uid. Elsewhere `/readyz` says `agent_network: "unrestricted"`.
 */

export type AgentNetworkMode = 'loopback_restricted' | 'unrestricted';

const TABLE_PREFIX = 'kandev_agents_';

/** Instances of this process using its table (tests run several): the last one to stop deletes it. */
let tableUsers = 0;

/** The nftables ruleset of one instance's table (pure; tested). */
export function tableScript(table: string): string {
  return `table inet ${table} {
  set uids { type uid; }
  set allowed { type uid . inet_service; }
  chain out {
    type filter hook output priority 0; policy accept;
    oifname "lo" meta skuid @uids ct state established,related accept
    oifname "lo" meta skuid @uids meta l4proto { tcp, udp } meta skuid . th dport @allowed accept
    oifname "lo" meta skuid @uids meta l4proto tcp reject with tcp reset
    oifname "lo" meta skuid @uids reject
  }
}
`;
}

/** The loopback ports an agent may reach: the MCP endpoint's when it is local, DNS, the collector's when local, and the configured extras. */
export function allowedLoopbackPorts(mcpUrl: string, otlpEndpoint: string | undefined, extra: readonly number[]): number[] {
  const ports = new Set<number>([53, ...extra]);
  for (const url of [mcpUrl, otlpEndpoint]) {
    if (!url) continue;
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      continue;
    }
    if (!isLoopbackHost(u.hostname)) continue;
    ports.add(Number(u.port || (u.protocol === 'https:' ? 443 : 80)));
  }
  return [...ports].sort((a, b) => a - b);
}

export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

function nft(script: string, args: string[] = ['-f', '-']): Promise<{ ok: boolean; out: string; err: string }> {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn('nft', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (e) {
      resolve({ ok: false, out: '', err: (e as Error).message });
      return;
    }
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += String(d)));
    child.stderr.on('data', (d) => (err += String(d)));
    child.once('error', (e) => resolve({ ok: false, out, err: e.message }));
    child.once('close', (code) => resolve({ ok: code === 0, out, err: err.trim() }));
    child.stdin.on('error', () => undefined); // nft gone early: its exit says why
    child.stdin.end(script);
  });
}

export class AgentNetwork {
  private constructor(
    readonly mode: AgentNetworkMode,
    readonly why: string,
    private readonly table: string | null,
    private readonly ports: readonly number[],
    private readonly log: Logger,
  ) {}

  /**
   * Makes this instance's table, removing tables of instances of this host that are gone (their
   * pid), or says why agents' loopback stays unrestricted.
   */
  static async open(opts: { setting: 'auto' | 'off'; isolated: boolean; ports: readonly number[]; log: Logger }): Promise<AgentNetwork> {
    const unrestricted = (why: string) => new AgentNetwork('unrestricted', why, null, [], opts.log);
    if (opts.setting === 'off') return unrestricted('AGENT_NETWORK=off');
    if (!opts.isolated) return unrestricted("agents share this service's uid: no packet filter can tell them apart");
    const listed = await nft('', ['list', 'tables']);
    if (!listed.ok) return unrestricted(`nftables is not usable here: ${listed.err || 'nft failed'}`);
    for (const m of listed.out.matchAll(new RegExp(`^table inet (${TABLE_PREFIX}(\\d+))$`, 'gm'))) {
      const pid = Number(m[2]);
      if (pid !== process.pid && !alive(pid)) await nft(`delete table inet ${m[1]}\n`);
    }
    const table = `${TABLE_PREFIX}${process.pid}`;
    // A table this process made before (a second instance in one process: tests) is reused as is.
    if (!new RegExp(`^table inet ${table}$`, 'm').test(listed.out)) {
      const made = await nft(tableScript(table));
      if (!made.ok) return unrestricted(`the kernel refused the agents' packet filter: ${made.err}`);
    }
    tableUsers++;
    return new AgentNetwork('loopback_restricted', `loopback ports ${opts.ports.join(', ')} only`, table, opts.ports, opts.log);
  }

  /** Before an execution's spawn: its uid reaches only the allowed loopback ports. Throws when the filter cannot be set. */
  async restrict(uid: number): Promise<void> {
    if (!this.table) return;
    const pairs = this.ports.map((p) => `${uid} . ${p}`).join(', ');
    // Adding an element that is there already is no error: a batch of adds fails only as a whole.
    await this.apply(`add element inet ${this.table} allowed { ${pairs} }\nadd element inet ${this.table} uids { ${uid} }\n`).catch((e: Error) => {
      throw new Error(`cannot restrict agent uid ${uid}'s loopback: ${e.message}`);
    });
  }

  /** After the uid's final sweep, before the uid may go to another execution (the caller holds it until this settles). */
  async release(uid: number): Promise<void> {
    if (!this.table) return;
    const pairs = this.ports.map((p) => `${uid} . ${p}`).join(', ');
    try {
      await this.apply(`delete element inet ${this.table} uids { ${uid} }\ndelete element inet ${this.table} allowed { ${pairs} }\n`);
    } catch {
      // Some element was gone already (a release after a failed restrict): each delete on its own.
      for (const cmd of [`delete element inet ${this.table} uids { ${uid} }`, `delete element inet ${this.table} allowed { ${pairs} }`]) {
        const r = await nft(`${cmd}\n`);
        if (!r.ok && !/No such file or directory/.test(r.err)) this.log.warn({ uid, err: r.err }, "cannot lift a finished execution's loopback filter");
      }
    }
  }

  /*
   * One `nft` at a time per instance, with whatever was asked meanwhile in one transaction: a tree
   * of a hundred executions starting or stopping together costs a few nft runs, not a hundred
   * (each is a process, tens of ms on a busy host). A batch that fails is retried item by item, so
   * one bad item fails alone.
   */
  private readonly pending: Array<{ script: string; done: (err: Error | null) => void }> = [];
  private running = false;

  private apply(script: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ script, done: (err) => (err ? reject(err) : resolve()) });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.splice(0);
        const all = await nft(batch.map((b) => b.script).join(''));
        if (all.ok) {
          for (const b of batch) b.done(null);
          continue;
        }
        for (const b of batch) {
          const one = batch.length === 1 ? all : await nft(b.script);
          b.done(one.ok ? null : new Error(one.err || 'nft failed'));
        }
      }
    } finally {
      this.running = false;
    }
  }

  /** At stop: the table goes (a crashed instance's is removed by the next instance that starts). */
  async close(): Promise<void> {
    if (!this.table) return;
    if (--tableUsers === 0) await nft(`delete table inet ${this.table}\n`);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
