import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { EventPublisher } from '@kandev/runtime';
import { eventually, processAlive } from '@kandev/testkit';
import type { Scenario } from '../scenario.js';
import { e2eIterations, startBenchStack, summarize, type BenchStack } from '../e2e.js';
import { family, stopChild } from '../families.js';

/**
 * The transcript write path (R-8.2, ADR 0035) under one chatty agent, on the whole stack:
 *  (a) throughput: CHUNKS `agent.message` chunks of one turn, published 100 at a time as fast as
 *      JetStream takes them, until all are in the transcript: chunks per second, and the items
 *      they became;
 *  (b) what that chatter costs another task's stop: `stop_task_kandev` of a running child, one at a
 *      time, first with nothing else going on, then while the chatty agent streams CHAT_RATE chunks
 *      a second (same stack, same run); p50/p99 of each, the chatty one with the quiet one as its
 *      baseline.
 * The chunks are published straight onto JetStream, as lifecycle relays an agent's (no agent
 * process is the chatty one: what is measured is the control plane's side).
 */
const CHUNKS = Number(process.env.BENCH_TRANSCRIPT_CHUNKS ?? 5_000);
/** Between one stop's agent being gone and the next stop, as 12-stop-task-mcp. */
const PACE_MS = 250;
const CHUNK = 'token '; // what a streaming model sends: a word at a time
/**
 * Chunks a second the chatty agent streams beside the stops: a real agent's tens by default; 0
 * publishes without pause (as fast as JetStream takes them: the worst case, where the bench's own
 * publishing shares the cores too).
 */
const CHAT_RATE = Number(process.env.BENCH_CHAT_RATE ?? 50);
/** The chatter's tick: CHAT_RATE / 10 chunks every 100 ms. */
const TICK_MS = 100;

/** A session row for the chatty agent (no process: its chunks are published by the bench). */
async function chattySession(b: BenchStack, sql: postgres.Sql, workspace_id: string) {
  const taskId = (await b.api.ok('POST', '/tasks', { workspace_id, title: 'chatty' })).id as string;
  const session_id = randomUUID();
  await sql`INSERT INTO orchestrator.sessions (id, task_id, state, is_primary, agent) VALUES (${session_id}, ${taskId}, 'RUNNING', true, 'bench')`;
  const scope = { workspace_id, task_id: taskId, session_id };
  const data = { execution_id: randomUUID(), turn_id: randomUUID(), text: CHUNK };
  const pub = new EventPublisher(b.nc);
  return {
    session_id,
    /** 100 chunks (or `n`), published together. */
    burst: (n = 100) => Promise.all(Array.from({ length: n }, () => pub.emit('agent.message', scope, data))),
    /** Waits until the transcript holds `chunks` chunks' text; the items it holds then. */
    async written(chunks: number, timeoutMs: number) {
      const want = chunks * CHUNK.length;
      return eventually(
        async () => {
          const [r] = await sql<
            { chars: number; items: number }[]
          >`SELECT coalesce(sum(length(text)), 0)::int AS chars, count(*)::int AS items FROM orchestrator.transcript_items WHERE session_id = ${session_id}`;
          return r!.chars >= want ? r!.items : null;
        },
        timeoutMs,
        20,
      );
    },
  };
}

/** Stops every child one at a time, each after the previous one's agent is gone and PACE_MS of quiet. */
async function stopsOf(b: BenchStack, n: number): Promise<number[]> {
  const f = await family(b, n);
  const out: number[] = [];
  try {
    for (const child of f.children) {
      out.push(await stopChild(f.mcp, child));
      await eventually(async () => !processAlive(f.pids.get(child)!), 30_000);
      await new Promise((r) => setTimeout(r, PACE_MS));
    }
  } finally {
    await f.mcp.close();
  }
  return out;
}

const scenario: Scenario = {
  name: 'transcript write: one chatty agent, and a stop beside it',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const stops = e2eIterations(20);
    const b = await startBenchStack({ TEARDOWN_GRACE_MS: '500' });
    ctx.defer(() => b.stop());
    const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
    ctx.defer(() => sql.end());
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;

    // (a) Throughput: publish to all in the transcript.
    const a = await chattySession(b, sql, ws);
    const start = performance.now();
    for (let i = 0; i < CHUNKS; i += 100) await a.burst(Math.min(100, CHUNKS - i));
    const published = performance.now();
    const items = await a.written(CHUNKS, 600_000);
    const done = performance.now();
    const perSecond = CHUNKS / ((done - start) / 1000);
    ctx.log(
      `transcript: ${CHUNKS} chunks published in ${(published - start).toFixed(0)} ms, all written in ${(done - start).toFixed(0)} ms: ${perSecond.toFixed(0)} chunks/s, ${items} item(s)`,
    );

    // (b) A stop of another task: quiet, then beside the chatty agent.
    const quiet = await stopsOf(b, stops);
    const c = await chattySession(b, sql, ws);
    let chatting = true;
    let sent = 0;
    const chatter = (async () => {
      while (chatting) {
        const t = performance.now();
        const n = CHAT_RATE > 0 ? Math.max(1, Math.round((CHAT_RATE * TICK_MS) / 1000)) : 100;
        await c.burst(n);
        sent += n;
        // Pacing, not waiting for a condition: the agent's stream rate.
        if (CHAT_RATE > 0) await new Promise((r) => setTimeout(r, Math.max(0, TICK_MS - (performance.now() - t))));
      }
    })();
    let chatty: number[];
    const chatStart = performance.now();
    try {
      chatty = await stopsOf(b, stops);
    } finally {
      chatting = false;
      await chatter;
    }
    const chatEnd = performance.now();
    await c.written(sent, 600_000);
    const drained = performance.now();
    ctx.log(
      `beside the stops: ${sent} chunks published in ${(chatEnd - chatStart).toFixed(0)} ms, all written ${(drained - chatEnd).toFixed(0)} ms after the last stop`,
    );
    const q = summarize(quiet);
    const l = summarize(chatty);
    ctx.log(
      `stop_task_kandev quiet p50 ${q.p50.toFixed(1)} / p99 ${q.p99.toFixed(1)} ms; chatty p50 ${l.p50.toFixed(1)} / p99 ${l.p99.toFixed(1)} ms (x${(l.p50 / q.p50).toFixed(2)} / x${(l.p99 / q.p99).toFixed(2)})`,
    );

    return [
      {
        id: 'transcript.write.chunk',
        label: `one agent's ${CHUNKS} chunks, publish to all in the transcript: ms per chunk (one sample: the run's mean; ${perSecond.toFixed(0)} chunks/s into ${items} item(s))`,
        stats: summarize([(done - start) / CHUNKS]),
      },
      { id: 'transcript.stop.quiet', label: `stop_task_kandev of a running child, 1 caller, nothing else going on`, stats: q },
      {
        id: 'transcript.stop.chatty',
        label: `stop_task_kandev of a running child, 1 caller, while one agent streams ${CHAT_RATE > 0 ? `${CHAT_RATE} chunks/s` : 'chunks without pause'} (${sent} in ${((chatEnd - chatStart) / 1000).toFixed(1)} s)`,
        stats: l,
        baseline: 'transcript.stop.quiet',
      },
    ];
  },
};
export default scenario;
