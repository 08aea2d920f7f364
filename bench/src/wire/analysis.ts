import { summarize, type Stats } from '../stats.js';

/**
 * Where a 1-caller stop's time goes, read off the wire: every TCP segment on loopback carries the
 * kernel's timestamp of its send, so the gap between a segment into a process and the next one
 * out of it is that process's time (its wake-up included), and the gap between a query and its
 * answer is the server's. Nothing here relies on our own spans or clocks, so it checks them.
 */

export interface Segment {
  /** Wall-clock ms of the send. */
  t: number;
  sport: number;
  dport: number;
  data: Buffer;
}

/** Who owns a local port: a service's role (from its command line) and pid. */
export interface Owner {
  pid: number;
  role: string;
}

/** Data-carrying TCP segments of an Ethernet-framed (tcpdump -i lo) pcap file. */
export function readPcap(buf: Buffer): Segment[] {
  const out: Segment[] = [];
  const magic = buf.readUInt32LE(0);
  const nanos = magic === 0xa1b23c4d;
  if (magic !== 0xa1b2c3d4 && !nanos) throw new Error('not a little-endian pcap file');
  for (let off = 24; off + 16 <= buf.length;) {
    const sec = buf.readUInt32LE(off);
    const frac = buf.readUInt32LE(off + 4);
    const incl = buf.readUInt32LE(off + 8);
    const p = buf.subarray(off + 16, off + 16 + incl);
    off += 16 + incl;
    if (p.length < 34 || p.readUInt16BE(12) !== 0x0800) continue;
    const ip = p.subarray(14);
    if (ip[9] !== 6) continue;
    const ihl = (ip[0]! & 15) * 4;
    const tcp = ip.subarray(ihl);
    const doff = (tcp[12]! >> 4) * 4;
    if (ip.readUInt16BE(2) - ihl - doff <= 0) continue;
    out.push({ t: sec * 1000 + frac / (nanos ? 1e6 : 1e3), sport: tcp.readUInt16BE(0), dport: tcp.readUInt16BE(2), data: tcp.subarray(doff) });
  }
  return out;
}

const text = (s: Segment) => s.data.toString('latin1', 0, Math.min(s.data.length, 160));

/** The segments of one stop or design-floor call, found by their subjects and inboxes. */
interface Call {
  httpIn: Segment;
  pub: Segment;
  msg: Segment;
  reply: Segment;
  replyIn: Segment;
  httpOut: Segment;
  /** The handler's process (orchestrator or decider): its PostgreSQL and NATS segments during the call. */
  pgOut: Segment[];
  pgIn: Segment[];
  natsOut: Segment[];
  natsIn: Segment[];
}

function findCalls(segs: Segment[], owners: Map<number, Owner>, subject: string): Call[] {
  const natsPorts = new Set([...owners.entries()].filter(([, o]) => o.role === 'nats-server').map(([p]) => p));
  const pgPorts = new Set([...owners.entries()].filter(([, o]) => o.role === 'postgres').map(([p]) => p));
  const pidOf = (port: number) => owners.get(port)?.pid ?? -1;
  const calls: Call[] = [];
  const pubRe = new RegExp(`^H?PUB ${subject.replaceAll('.', '\\.')} (\\S+)`);
  segs.forEach((pub, i) => {
    if (!natsPorts.has(pub.dport)) return;
    const inbox = pubRe.exec(text(pub))?.[1];
    if (!inbox) return;
    const edgePid = pidOf(pub.sport);
    let httpIn: Segment | undefined;
    for (let k = i - 1; k >= 0 && segs[k]!.t > pub.t - 50; k--) {
      const s = segs[k]!;
      if (pidOf(s.dport) === edgePid && text(s).startsWith('POST ')) {
        httpIn = s;
        break;
      }
    }
    let msg: Segment | undefined, reply: Segment | undefined, replyIn: Segment | undefined, httpOut: Segment | undefined;
    for (let k = i + 1; k < segs.length && segs[k]!.t < pub.t + 1_000; k++) {
      const s = segs[k]!;
      const body = text(s);
      if (!msg && natsPorts.has(s.sport) && body.includes(`MSG ${subject} `)) msg = s;
      else if (msg && !reply && s.sport === msg.dport && body.includes(`PUB ${inbox} `)) reply = s;
      else if (reply && !replyIn && s.dport === pub.sport && body.includes(`MSG ${inbox} `)) replyIn = s;
      else if (replyIn && httpIn && s.sport === httpIn.dport && s.dport === httpIn.sport) {
        httpOut = s;
        break;
      }
    }
    if (!httpIn || !msg || !reply || !replyIn || !httpOut) return;
    const handlerPid = pidOf(msg.dport);
    const during = segs.filter((s) => s.t >= msg!.t && s.t <= reply!.t);
    const mine = (s: Segment, port: 'sport' | 'dport') => pidOf(s[port]) === handlerPid;
    // The call's own connection: of the handler's pooled connections, the one with the most
    // segments meanwhile (its two flights); another one's (the outbox relay's, the reconciler's) are left out.
    const perConnection = new Map<number, number>();
    for (const s of during) if (mine(s, 'sport') && pgPorts.has(s.dport)) perConnection.set(s.sport, (perConnection.get(s.sport) ?? 0) + 1);
    for (const s of during) if (mine(s, 'dport') && pgPorts.has(s.sport)) perConnection.set(s.dport, (perConnection.get(s.dport) ?? 0) + 1);
    const own = [...perConnection.entries()].sort((a, b) => b[1] - a[1])[0]?.[0];
    calls.push({
      httpIn,
      pub,
      msg,
      reply,
      replyIn,
      httpOut,
      pgOut: during.filter((s) => s.sport === own && pgPorts.has(s.dport)),
      pgIn: during.filter((s) => s.dport === own && pgPorts.has(s.sport)),
      natsOut: during.filter((s) => mine(s, 'sport') && natsPorts.has(s.dport) && s !== reply),
      natsIn: during.filter((s) => mine(s, 'dport') && natsPorts.has(s.sport) && s !== msg),
    });
  });
  return calls;
}

/** Calls that came after at least `quietMs` without one (the paced samples, not the back-to-back ones); never a first call, which is a cold one. */
function paced(calls: Call[], quietMs: number): Call[] {
  return calls.filter((c, i) => i > 0 && c.httpIn.t - calls[i - 1]!.httpOut.t >= quietMs);
}

/** A wall-clock span of a client call (BENCH_WALL_LOG) and the call it made. */
export interface ClientCall {
  kind: 'stop' | 'design';
  start: number;
  end: number;
}

function clientSides(calls: Call[], client: ClientCall[]): { pre: number[]; post: number[] } {
  const pre: number[] = [];
  const post: number[] = [];
  for (const c of calls) {
    const w = client.find((x) => x.start <= c.httpIn.t && x.end >= c.httpOut.t);
    if (!w) continue;
    pre.push(c.httpIn.t - w.start);
    post.push(w.end - c.httpOut.t);
  }
  return { pre, post };
}

export interface WireRow {
  segment: string;
  design: Stats | null;
  stop: Stats | null;
}

const stat = (v: number[]) => {
  const finite = v.filter(Number.isFinite);
  return finite.length ? summarize(finite) : null;
};
const between = (a: Segment | undefined, b: Segment | undefined) => (a && b ? b.t - a.t : Number.NaN);

/**
 * Each call cut at the same points for the stop and the design floor: the client's own time, the
 * MCP server's (HTTP in → NATS request out, and reply in → HTTP out), NATS, the handler's time
 * before its first query, each PostgreSQL flight (query out → last answer in, the server's time),
 * the handler's time between the flights and after the commit.
 */
export function wireBreakdown(
  segs: Segment[],
  owners: Map<number, Owner>,
  client: ClientCall[],
  quietMs: number,
): { rows: WireRow[]; stops: number; designs: number } {
  const designs = paced(findCalls(segs, owners, 'bench.design_floor.decide'), quietMs);
  // The stops sampled beside the paced design floor, one before each: the figures' stack, which
  // exports no spans (12-stop's second, traced stack has no design floor beside it).
  const from = (designs[0]?.httpIn.t ?? 0) - 1_000;
  const to = (designs.at(-1)?.httpOut.t ?? 0) + 1_000;
  const stops = paced(findCalls(segs, owners, 'kandev.orch.mcp.stop_child_task'), quietMs).filter(
    (c) => c.httpIn.t >= from && c.httpIn.t <= to && c.natsOut.some((s) => text(s).includes('DIRECT.GET')),
  );
  const cut = (calls: Call[]) => {
    const out: Record<string, number[]> = {};
    const add = (k: string, v: number) => (out[k] ??= []).push(v);
    for (const c of calls) {
      const firstQuery = c.pgOut[0];
      // The write flight: the handler's first query out after the answers to its first flight.
      const lastOut = c.pgOut.at(-1)!;
      const flight2 = c.pgOut.find((s) => c.pgIn.some((r) => r.t > firstQuery!.t && r.t < s.t));
      const flight1Answered = [...c.pgIn].reverse().find((r) => flight2 && r.t < flight2.t);
      const commitAnswered = c.pgIn.at(-1);
      add('mcp server: HTTP request in → NATS request out', between(c.httpIn, c.pub));
      add('NATS: request → handler', between(c.pub, c.msg));
      add('handler: request in → first NATS request out (the registry listing)', between(c.msg, c.natsOut[0]));
      add('handler: request in → first query out', between(c.msg, firstQuery));
      add('PostgreSQL: first flight (BEGIN, locks) out → answered', between(firstQuery, flight1Answered));
      add('handler: first flight answered → write flight out', between(flight1Answered, flight2));
      add('handler: write flight, first segment out → last out', between(flight2, lastOut));
      add('PostgreSQL: write flight out → COMMIT answered', between(flight2, commitAnswered));
      // Answers to the flight's earlier segments all in before its last segment left: the server sat idle that long.
      const answeredBefore = flight2 ? c.pgIn.filter((r) => r.t > flight2.t && r.t < lastOut.t).at(-1) : undefined;
      if (flight2 && lastOut !== flight2)
        add(
          "PostgreSQL: idle in the write flight, its last answer → the flight's last segment out",
          answeredBefore ? Math.max(0, lastOut.t - answeredBefore.t) : 0,
        );
      add('handler: COMMIT answered → reply out', between(commitAnswered, c.reply));
      add('NATS: reply → mcp server', between(c.reply, c.replyIn));
      add('mcp server: reply in → HTTP response out', between(c.replyIn, c.httpOut));
      add('server side: HTTP request in → HTTP response out', between(c.httpIn, c.httpOut));
      add('PostgreSQL answers (segments in)', c.pgIn.length);
      add('NATS segments in and out of the handler', c.natsIn.length + c.natsOut.length);
    }
    const sides = clientSides(
      calls,
      client.filter((x) => x.kind === (calls === stops ? 'stop' : 'design')),
    );
    out['client: call → HTTP request out'] = sides.pre;
    out['client: HTTP response in → call resolved'] = sides.post;
    return out;
  };
  const s = cut(stops);
  const d = cut(designs);
  const order = [
    'client: call → HTTP request out',
    'mcp server: HTTP request in → NATS request out',
    'NATS: request → handler',
    'handler: request in → first NATS request out (the registry listing)',
    'handler: request in → first query out',
    'PostgreSQL: first flight (BEGIN, locks) out → answered',
    'handler: first flight answered → write flight out',
    'handler: write flight, first segment out → last out',
    'PostgreSQL: write flight out → COMMIT answered',
    "PostgreSQL: idle in the write flight, its last answer → the flight's last segment out",
    'handler: COMMIT answered → reply out',
    'NATS: reply → mcp server',
    'mcp server: reply in → HTTP response out',
    'client: HTTP response in → call resolved',
    'server side: HTTP request in → HTTP response out',
    'PostgreSQL answers (segments in)',
    'NATS segments in and out of the handler',
  ];
  return {
    rows: order.map((segment) => ({ segment, design: stat(d[segment] ?? []), stop: stat(s[segment] ?? []) })),
    stops: stops.length,
    designs: designs.length,
  };
}
