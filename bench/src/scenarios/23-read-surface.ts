import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { Orch, OrchRead } from '@kandev/contracts';
import { EventPublisher, request } from '@kandev/runtime';
import type { Scenario } from '../scenario.js';
import { e2eIterations, samples, startBenchStack, summarize } from '../e2e.js';
import type { Stats } from '../stats.js';

/**
 * at scale: a page of 50 of a 100,000-task workspace (seeded by one bulk insert, as
 * the orchestrator stores tasks), first page and deep in the listing, through the gateway and over
 * NATS; a session with its turns, as the console polls it; and the transcript write path of one chatty agent (agent.message chunks on JetStream →
 * the orchestrator's transcript consumer → coalesced item), as chunks per second. The transcript
 * path alone, with a concurrent stop's latency beside it, is 24-transcript-write.ts.
 */
const TASKS = Number(process.env.BENCH_READ_TASKS ?? 100_000);
const CHUNKS = Number(process.env.BENCH_TRANSCRIPT_CHUNKS ?? 5_000);
const SESSION_TURNS = 20;

const scenario: Scenario = {
  name: 'read surface',
  async run(ctx) {
    if (ctx.round > 1) return [];
    const b = await startBenchStack();
    ctx.defer(() => b.stop());
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench' })).id as string;
    const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
    ctx.defer(() => sql.end());
    const t = performance.now();
    // One root in ten, each followed by its nine children; statuses spread; created_at one ms apart.
    await sql`
      WITH nodes AS (SELECT i, gen_random_uuid() AS id FROM generate_series(0, ${TASKS - 1}) AS i)
      INSERT INTO orchestrator.tasks (id, workspace_id, parent_id, title, status, created_at, updated_at)
      SELECT n.id, ${ws}, p.id, 'bench task ' || n.i, (ARRAY['TODO','IN_PROGRESS','REVIEW','COMPLETED'])[1 + n.i % 4],
             now() - make_interval(secs => (${TASKS} - n.i) / 1000.0), now()
      FROM nodes n LEFT JOIN nodes p ON n.i % 10 <> 0 AND p.i = n.i - n.i % 10`;
    await sql`ANALYZE orchestrator.tasks`;
    ctx.log(`seeded ${TASKS} tasks in ${((performance.now() - t) / 1000).toFixed(1)} s`);

    const actor = { type: 'operator' as const, id: 'bench', workspaces: ['*'] };
    // A cursor halfway down the listing.
    let deep: string | null = null;
    {
      let cursor: string | undefined;
      for (let i = 0; i < TASKS / 2 / 200; i++) {
        const p = await request(b.nc, OrchRead.taskList, { actor, workspace_id: ws, limit: 200, ...(cursor ? { cursor } : {}) });
        cursor = p.next_cursor ?? undefined;
      }
      deep = cursor ?? null;
    }
    if (!deep) throw new Error('no deep cursor');
    const first = await b.api.ok('GET', `/tasks?workspace_id=${ws}&limit=50`);
    if (first.items.length !== 50 || !first.next_cursor) throw new Error(`bad first page ${JSON.stringify(first).slice(0, 200)}`);

    const n = e2eIterations(500);
    const httpFirst = await samples(() => b.api.ok('GET', `/tasks?workspace_id=${ws}&limit=50`), n);
    const natsFirst = await samples(() => request(b.nc, OrchRead.taskList, { actor, workspace_id: ws, limit: 50 }), n);
    const natsDeep = await samples(() => request(b.nc, OrchRead.taskList, { actor, workspace_id: ws, limit: 50, cursor: deep! }), n);
    const natsRoots = await samples(() => request(b.nc, OrchRead.taskList, { actor, workspace_id: ws, limit: 50, roots: true }), n);
    const natsStatus = await samples(() => request(b.nc, OrchRead.taskList, { actor, workspace_id: ws, limit: 50, status: ['REVIEW'] }), n);
    const natsQ = await samples(() => request(b.nc, OrchRead.taskList, { actor, workspace_id: ws, limit: 50, q: 'task 4242' }), n);

    // A session page as the console polls it: a session with SESSION_TURNS ended turns and no live execution.
    const detailTask = (await b.api.ok('POST', '/tasks', { workspace_id: ws, title: 'detail' })).id as string;
    const detailSession = randomUUID();
    await sql`INSERT INTO orchestrator.sessions (id, task_id, state, is_primary, agent, started_at) VALUES (${detailSession}, ${detailTask}, 'WAITING_FOR_INPUT', true, 'bench', now())`;
    await sql`
      INSERT INTO orchestrator.turns (id, session_id, started_at, completed_at, stop_reason)
      SELECT gen_random_uuid(), ${detailSession}, now() - make_interval(secs => ${SESSION_TURNS} - i), now() - make_interval(secs => ${SESSION_TURNS} - i - 0.5), 'end_turn'
      FROM generate_series(0, ${SESSION_TURNS - 1}) AS i`;
    const httpSession = await samples(() => b.api.ok('GET', `/sessions/${detailSession}`), n);
    const natsSession = await samples(() => request(b.nc, Orch.sessionGet, { actor, session_id: detailSession }), n);

    // One chatty agent: CHUNKS chunks of one turn, published as fast as JetStream takes them.
    const taskId = (await b.api.ok('POST', '/tasks', { workspace_id: ws, title: 'chatty' })).id as string;
    const sessionId = randomUUID();
    const executionId = randomUUID();
    const turnId = randomUUID();
    await sql`INSERT INTO orchestrator.sessions (id, task_id, state, is_primary, agent) VALUES (${sessionId}, ${taskId}, 'RUNNING', true, 'bench')`;
    const pub = new EventPublisher(b.nc);
    const scope = { workspace_id: ws, task_id: taskId, session_id: sessionId };
    const chunk = 'token '; // what a streaming model sends: a word at a time
    const start = performance.now();
    for (let i = 0; i < CHUNKS; i += 100) {
      await Promise.all(
        Array.from({ length: Math.min(100, CHUNKS - i) }, () => pub.emit('agent.message', scope, { execution_id: executionId, turn_id: turnId, text: chunk })),
      );
    }
    const published = performance.now();
    const want = CHUNKS * chunk.length;
    for (;;) {
      const [row] = await sql<
        { n: number }[]
      >`SELECT coalesce(sum(length(text)), 0)::int AS n FROM orchestrator.transcript_items WHERE session_id = ${sessionId}`;
      if (row!.n >= want) break;
      if (performance.now() - start > 300_000) throw new Error(`transcript holds ${row!.n} of ${want} characters after 300 s`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const done = performance.now();
    const [items] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM orchestrator.transcript_items WHERE session_id = ${sessionId}`;
    const perChunkMs = (done - start) / CHUNKS;
    ctx.log(
      `transcript: ${CHUNKS} chunks published in ${(published - start).toFixed(0)} ms, all written in ${(done - start).toFixed(0)} ms (${(CHUNKS / ((done - start) / 1000)).toFixed(0)} chunks/s) into ${items!.n} items`,
    );
    const rate: Stats = summarize([perChunkMs]);

    return [
      {
        id: 'read.tasks.http.first',
        label: `GET /tasks?workspace_id&limit=50, first page of ${TASKS} tasks, through the gateway`,
        stats: summarize(httpFirst),
        baseline: 'nats.request.helper',
      },
      {
        id: 'read.tasks.nats.first',
        label: `orch.task.list limit 50, first page of ${TASKS} tasks`,
        stats: summarize(natsFirst),
        baseline: 'nats.request.helper',
      },
      {
        id: 'read.tasks.nats.deep',
        label: `orch.task.list limit 50, the page after row ${TASKS / 2}`,
        stats: summarize(natsDeep),
        baseline: 'nats.request.helper',
      },
      {
        id: 'read.tasks.nats.roots',
        label: `orch.task.list roots=true limit 50 (${TASKS / 10} roots)`,
        stats: summarize(natsRoots),
        baseline: 'nats.request.helper',
      },
      {
        id: 'read.tasks.nats.status',
        label: `orch.task.list status=REVIEW limit 50 (${TASKS / 4} match)`,
        stats: summarize(natsStatus),
        baseline: 'nats.request.helper',
      },
      { id: 'read.tasks.nats.q', label: `orch.task.list q="task 4242" limit 50 (trigram index)`, stats: summarize(natsQ), baseline: 'nats.request.helper' },
      {
        id: 'read.session.http',
        label: `GET /sessions/:id (${SESSION_TURNS} turns) through the gateway`,
        stats: summarize(httpSession),
        baseline: 'nats.request.helper',
      },
      { id: 'read.session.nats', label: `orch.session.get (${SESSION_TURNS} turns)`, stats: summarize(natsSession), baseline: 'nats.request.helper' },
      {
        id: 'transcript.chunk.write',
        label: `one agent's ${CHUNKS} chunks, publish to all in the transcript: ms per chunk (one sample: the run's mean)`,
        stats: rate,
      },
    ];
  },
};
export default scenario;
