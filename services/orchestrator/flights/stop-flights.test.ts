import { it } from 'vitest';
import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { startHarness } from '../test/harness.js';
import { recordAudit } from '../src/store/audit.js';
import { detachPendingBundles } from '../src/store/clarifications.js';
import { cancelSessions, lockActiveSessionsOfChild } from '../src/store/sessions.js';
import { bumpFenceOfChild, reviewAfterStop, tasksByIds } from '../src/store/tasks.js';
import { completeOpenTurnsOfSessions } from '../src/store/turns.js';

/**
 * A measurement, not a test (`npm run flights -w @kandev/orchestrator`; docs/history/fast-paths-rounds.md,
 * "Statements"): the PostgreSQL flights of a child stop, issued by the store functions the stop
 * uses, against the design floor's two flights (BEGIN + a row lock; a write + COMMIT) and against
 * the first flight as it was before (five statements), on the harness's own database and
 * connections. Variants alternate, each sample after PACE_MS of quiet as the bench's 1-caller
 * stops; the first WARMUP samples of each (statements prepared per connection) are dropped.
 */
const SAMPLES = Number(process.env.FLIGHT_SAMPLES ?? 200);
const PACE_MS = Number(process.env.FLIGHT_PACE_MS ?? 60);
const WARMUP = 20;

/**
 * BEGIN sent now, ahead of what is listed beside it: a statement awaited inside a helper is sent from
 * a later microtask than a plain one, so `Promise.all([c\`BEGIN\`, helper(c)])` sends the helper's
 * statement first, outside the transaction (transactInFlights sends BEGIN the same way).
 */
function begun(c: postgres.ReservedSql) {
  const begin = c`BEGIN`;
  begin.catch(() => undefined);
  return begin;
}

/** The stop's write flight as issued (the first), and with parts of it left out or changed. */
const WRITE_VARIANTS: ReadonlyArray<{ label: string; turnsAndBundles: boolean; audit: boolean; review: 'function' | 'plain' | null; outbox: boolean; payloadBytes: number }> = [
  { label: 'stop, write flight: writes, audit, REVIEW, outbox, COMMIT', turnsAndBundles: true, audit: true, review: 'function', outbox: true, payloadBytes: 1000 },
  { label: '  the same, 10-byte event payloads', turnsAndBundles: true, audit: true, review: 'function', outbox: true, payloadBytes: 10 },
  { label: '  the same, REVIEW as plain UPDATE + INSERT (no subtransaction)', turnsAndBundles: true, audit: true, review: 'plain', outbox: true, payloadBytes: 1000 },
  { label: '  without REVIEW', turnsAndBundles: true, audit: true, review: null, outbox: true, payloadBytes: 1000 },
  { label: '  without REVIEW, audit, turns, bundles', turnsAndBundles: false, audit: false, review: null, outbox: true, payloadBytes: 1000 },
  { label: '  the session write and COMMIT only', turnsAndBundles: false, audit: false, review: null, outbox: false, payloadBytes: 0 },
];

const pct = (xs: readonly number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)]!;
const row = (name: string, xs: readonly number[]) => `${name.padEnd(58)} p50 ${pct(xs, 0.5).toFixed(3).padStart(7)}  p90 ${pct(xs, 0.9).toFixed(3).padStart(7)}  p99 ${pct(xs, 0.99).toFixed(3).padStart(7)} ms`;

it('times the stop flights against the design floor', async () => {
  const h = await startHarness();
  try {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    const session = await h.startSession(child.id, 'work');
    const sql = postgres(h.db.url, { max: 10, onnotice: () => undefined, connection: { search_path: 'orchestrator,public' } });
    await sql`CREATE TABLE IF NOT EXISTS public.flight_decision (id int PRIMARY KEY, n bigint NOT NULL)`;
    await sql`INSERT INTO public.flight_decision VALUES (1, 0) ON CONFLICT DO NOTHING`;
    const out: Record<string, number[]> = {};
    const time = async (name: string, flight: () => Promise<unknown>) => {
      const t = performance.now();
      await flight();
      (out[name] ??= []).push(performance.now() - t);
    };
    const quiet = () => new Promise((r) => setTimeout(r, PACE_MS));
    for (let i = 0; i < SAMPLES + WARMUP; i++) {
      const warm = i < WARMUP;
      const name = (n: string) => (warm ? `warmup ${n}` : n);
      // The stop's first flight as it was, then as it is; both rolled back.
      for (const [label, statements] of [
        ['stop, first flight, before: BEGIN, now(), checks read, bump, locks', 5],
        ['stop, first flight: BEGIN, bump with now(), locks', 3],
      ] as const) {
        await quiet();
        const c = await sql.reserve();
        await time(name(label), () =>
          statements === 5
            ? Promise.all([begun(c), c`SELECT now()`, tasksByIds(c as never, [parent.id, child.id]), bumpFenceOfChild(c as never, child.id, parent.id), lockActiveSessionsOfChild(c as never, child.id, parent.id)])
            : Promise.all([begun(c), bumpFenceOfChild(c as never, child.id, parent.id), lockActiveSessionsOfChild(c as never, child.id, parent.id)]),
        );
        await c`ROLLBACK`;
        c.release();
      }
      // The stop's write flight, as the stop issues it, then with parts left out to see what each
      // costs (the session and task put back afterwards, not timed).
      for (const variant of WRITE_VARIANTS) {
        await quiet();
        const c = await sql.reserve();
        await Promise.all([begun(c), bumpFenceOfChild(c as never, child.id, parent.id), lockActiveSessionsOfChild(c as never, child.id, parent.id)]);
        const ids = [session.id];
        const payload = { note: 'x'.repeat(variant.payloadBytes) };
        const event = { id: randomUUID(), subject: 'kandev.evt.flights', payload, trace: {} };
        await time(name(variant.label), async () => {
          const writes = Promise.all([
            variant.turnsAndBundles ? completeOpenTurnsOfSessions(c as never, ids, 'cancelled') : null,
            cancelSessions(c as never, ids, 'stopped_by_parent_task'),
            variant.turnsAndBundles ? detachPendingBundles(c as never, ids, 'stopped_by_parent_task') : null,
            variant.audit ? recordAudit(c as never, { task_id: child.id, workspace_id: ws.id, action: 'mcp.stop_task', actor: 'agent', reason: 'stopped_by_parent_task', request_id: 'flights', outcome: 'stopped', details: { sessions: ids } }) : null,
            variant.review === 'function'
              ? reviewAfterStop(c as never, child.id, event)
              : variant.review === 'plain'
                ? Promise.all([
                    c`UPDATE orchestrator.tasks SET status = 'REVIEW', cancelled_at = NULL, updated_at = now() WHERE id = ${child.id} RETURNING *`,
                    c`INSERT INTO outbox (id, subject, payload, trace) VALUES (${event.id}, ${event.subject}, ${c.json(payload)}, '{}'::jsonb)`,
                  ])
                : null,
          ]);
          await new Promise((r) => setImmediate(r)); // as transactInFlights: outbox rows and COMMIT behind every write
          await Promise.all([writes, variant.outbox ? c`INSERT INTO outbox (id, subject, payload, trace) VALUES (${randomUUID()}, 'kandev.evt.flights', ${c.json(payload)}, '{}'::jsonb)` : null, c`COMMIT`]);
        });
        c.release();
        await sql`UPDATE orchestrator.sessions SET state = 'RUNNING', completed_at = NULL, cancel_reason = NULL WHERE id = ${session.id}`;
        await sql`UPDATE orchestrator.turns SET completed_at = NULL, stop_reason = NULL WHERE session_id = ${session.id}`;
        await sql`UPDATE orchestrator.tasks SET status = 'IN_PROGRESS' WHERE id = ${child.id}`;
      }
      // The design floor's two flights.
      await quiet();
      {
        const c = await sql.reserve();
        await time(name('design floor, first flight: BEGIN, row lock'), () => Promise.all([begun(c), c`SELECT n FROM public.flight_decision WHERE id = 1 FOR UPDATE`]));
        await time(name('design floor, write flight: UPDATE, COMMIT'), () => Promise.all([c`UPDATE public.flight_decision SET n = n + 1 WHERE id = 1`, c`COMMIT`]));
        c.release();
      }
    }
    await sql.end();
    const lines = Object.entries(out)
      .filter(([k]) => !k.startsWith('warmup'))
      .map(([k, xs]) => row(k, xs));
    console.log(`\n${SAMPLES} samples each, ${PACE_MS} ms of quiet before each, load average ${(await import('node:os')).loadavg()[0]!.toFixed(2)}\n${lines.join('\n')}\n`);
  } finally {
    await h.stop();
  }
}, 900_000);
