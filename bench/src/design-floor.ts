import { connectMcp } from '@kandev/testkit';
import { startFixture, startSdkNoopServer } from './mcp-floor.js';
import { recordWall } from './wall.js';

/**
 * The design floor of a stop: the path the design prescribes, with nothing of ours on it.
 * An MCP client calls a tool of the SDK's own stateless server (the floor's MCP server, in its own
 * process); the tool makes one bare NATS request to a decider (its own process, as the orchestrator
 * is), which makes the two PostgreSQL round trips a stop's decision takes (BEGIN + a row lock, then a
 * write + COMMIT: "the decision in one or two round trips", the fence bump its own statement) and
 * answers. The floor (`floor.mcp+nats+pg`) chains the same three parts from the client, one
 * PostgreSQL round trip fewer and every hop back to the client; this one nests them as the services
 * do. A stop cannot be faster than this chain on the same machine, whatever its code does.
 */
/** One design-floor call, per hop (ms), as the stop's `stop_task.hop.1.*` rows split a stop. */
export interface DesignFloorHops {
  total: number;
  /** MCP SDK client + HTTP + the SDK server outside its tool's NATS request. */
  client: number;
  /** relay → decider → relay over NATS, both processes, outside the decider's handler. */
  nats: number;
  /** A pooled connection reserved. */
  reserve: number;
  /** BEGIN + the row lock (one flight). */
  lock: number;
  /** The write + COMMIT (one flight, one fsync). */
  commit: number;
  /** Committed → reply sent. */
  reply: number;
}

/** `login`: the stack's NATS admits only known users (ADR 0054); the floor's processes log in as the test observer. */
export async function startDesignFloor(natsUrl: string, dbUrl: string, login: { user?: string; pass?: string } = {}) {
  const natsLogin: Record<string, string> = login.user ? { BENCH_RELAY_NATS_USER: login.user, BENCH_RELAY_NATS_PASS: login.pass ?? '' } : {};
  const subject = 'bench.design_floor.decide';
  const decider = await startFixture<{ ready: boolean }>('design-floor-decider', {
    BENCH_RELAY_NATS_URL: natsUrl,
    BENCH_RELAY_SUBJECT: subject,
    BENCH_DECIDER_DB_URL: dbUrl,
    ...natsLogin,
  });
  const edge = await startSdkNoopServer({ relay: { natsUrl, subject, login } });
  const client = await connectMcp(edge.url, 'unused');
  let stopped: Promise<void> | undefined;
  return {
    /** One call through the whole chain, in ms. */
    async call(): Promise<number> {
      return (await this.hops()).total;
    },
    /** One call, with where its time went (each step timed inside the process that ran it). */
    async hops(): Promise<DesignFloorHops> {
      const t = performance.now();
      const res = await client.callTool({ name: 'relay', arguments: {} });
      const total = performance.now() - t;
      recordWall('design', t, total);
      const text = (res.content as Array<{ text?: string }>)[0]?.text ?? '';
      const r = JSON.parse(text) as { ok: boolean; nats_ms: number; handler_ms: number; reserve_ms: number; lock_ms: number; commit_ms: number };
      if (!r.ok) throw new Error(`design floor call failed: ${text}`);
      return {
        total,
        client: total - r.nats_ms,
        nats: r.nats_ms - r.handler_ms,
        reserve: r.reserve_ms,
        lock: r.lock_ms,
        commit: r.commit_ms,
        reply: r.handler_ms - r.reserve_ms - r.lock_ms - r.commit_ms,
      };
    },
    /** Idempotent (stopped once its samples are in, and again by the scenario's cleanup). */
    stop() {
      stopped ??= (async () => {
        await client.close();
        await edge.stop();
        await decider.stop();
      })();
      return stopped;
    },
  };
}
