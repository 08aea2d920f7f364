import { assertInvariants, eventually, type InvariantBounds } from '@kandev/testkit';
import { expect } from 'vitest';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * Operator task stops and execution listings while many live agents are torn down:
 * "stops must not fail under load". Every listing of a task goes on until that task's registry entry
 * has been deleted and its delete marker has aged out under it, the moment that used to hang a
 * `kv.keys()` listing for 30 s on nats-server 2.9. Shared by the small variant in `npm test` and the
 * 40-agent one in `npm run test:faults`.
 */
export const REGISTRY_TTL_MS = 3_000;
export const TEARDOWN_GRACE_MS = 500;
/**
 * The callers' budget (the gateway's request timeout): a request that is not answered within it
 * comes back 503, so "every request answered 200" means "every request answered within its bound".
 * Well under the 30 s default, so a listing stuck on a 30 s heartbeat shows.
 */
export const REQUEST_BUDGET_MS = 10_000;
const bounds: InvariantBounds = { graceMs: TEARDOWN_GRACE_MS + 2_000, reconcileMs: REGISTRY_TTL_MS + 5_000 + 1_000 };

export const startLoadWorld = (): Promise<World> =>
  startWorld({ REGISTRY_TTL_MS: String(REGISTRY_TTL_MS), TEARDOWN_GRACE_MS: String(TEARDOWN_GRACE_MS), GATEWAY_REQUEST_TIMEOUT_MS: String(REQUEST_BUDGET_MS) });

interface Answer {
  what: 'list' | 'stop';
  task: string;
  status: number;
  ms: number;
  body: unknown;
}

async function timed(what: Answer['what'], task: string, call: () => Promise<{ status: number; body: unknown }>): Promise<Answer> {
  const started = performance.now();
  const r = await call();
  return { what, task, status: r.status, ms: performance.now() - started, body: r.body };
}

/** Starts a long-sleeping session on each task, a few at a time, honouring a load refusal's Retry-After. */
async function startAgents(w: World, taskIds: string[], concurrency: number): Promise<Map<string, { session: string; execution: string; pid: number }>> {
  const started = new Map<string, { session: string; execution: string; pid: number }>();
  const queue = [...taskIds];
  const worker = async () => {
    for (let taskId = queue.shift(); taskId; taskId = queue.shift()) {
      for (;;) {
        const r = await w.api.post(`/tasks/${taskId}/sessions`, { prompt: sleepScript(600_000) });
        if (r.status === 201) {
          const id = (r.body as { id: string }).id;
          const e = await eventually(
            async () => (await w.api.get(`/sessions/${id}`)).body.execution as { execution_id: string; pid: number | null } | null,
            60_000,
          );
          started.set(taskId, { session: id, execution: e.execution_id, pid: e.pid! });
          break;
        }
        // Refused for load (503 + Retry-After): the admission queue is full, come back as told.
        expect(r.status, JSON.stringify(r.body)).toBe(503);
        const after = Number((r.body as { error?: { details?: { retry_after_s?: number } } }).error?.details?.retry_after_s ?? 1);
        await new Promise((res) => setTimeout(res, after * 1_000));
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return started;
}

/**
 * One task: list its executions without pause while its stop is sent and its agent is torn down,
 * and go on listing for a registry TTL after the entry is gone (the delete marker ages out).
 */
async function stopWhileListing(w: World, taskId: string, executionId: string, answers: Answer[]): Promise<void> {
  let stopped: Answer | null = null;
  let goneSince: number | null = null;
  const lister = (async () => {
    while (goneSince === null || performance.now() - goneSince < REGISTRY_TTL_MS + 1_000) {
      const a = await timed('list', taskId, () => w.api.get(`/tasks/${taskId}/executions`));
      answers.push(a);
      if (a.status !== 200) return; // reported below; listing on would only repeat it
      const listed = (a.body as Array<{ execution_id: string }>).some((e) => e.execution_id === executionId);
      if (stopped && !listed && goneSince === null) goneSince = performance.now();
    }
  })();
  stopped = await timed('stop', taskId, () => w.api.post(`/tasks/${taskId}/stop`));
  answers.push(stopped);
  if (stopped.status !== 200) goneSince = -Infinity; // nothing to wait for
  await lister;
}

/** Starts `agents` live agents, then stops every task while listing it, all at once. */
export async function stopsUnderLoad(w: World, agents: number): Promise<void> {
  const tasks = await Promise.all(Array.from({ length: agents }, () => makeTask(w.api)));
  const taskIds = tasks.map((t) => t.task.id);
  const live = await startAgents(w, taskIds, 4);
  const agentPids = new Map([...live.values()].map((x) => [x.session, x.pid]));

  const answers: Answer[] = [];
  await Promise.all(taskIds.map((t) => stopWhileListing(w, t, live.get(t)!.execution, answers)));

  const failed = answers.filter((a) => a.status !== 200).map((a) => ({ what: a.what, task: a.task, status: a.status, ms: Math.round(a.ms), body: a.body }));
  expect(failed, "every stop and listing is answered 200 within the callers' budget").toEqual([]);
  const stops = answers.filter((a) => a.what === 'stop');
  expect(stops).toHaveLength(agents);
  for (const s of stops) expect(s.body).toMatchObject({ status: 'stopped', executions: [{ execution_id: live.get(s.task)!.execution }] });
  const ms = (what: Answer['what']) =>
    answers
      .filter((a) => a.what === what)
      .map((a) => a.ms)
      .sort((a, b) => a - b);
  const pct = (xs: number[], p: number) => Math.round(xs[Math.min(xs.length - 1, Math.floor(xs.length * p))]!);
  const [lists, stopMs] = [ms('list'), ms('stop')];
  console.log(
    JSON.stringify({
      agents,
      listings: lists.length,
      list_p50_ms: pct(lists, 0.5),
      list_p99_ms: pct(lists, 0.99),
      list_max_ms: pct(lists, 1),
      stops: stopMs.length,
      stop_p50_ms: pct(stopMs, 0.5),
      stop_max_ms: pct(stopMs, 1),
    }),
  );
  await assertInvariants(w.stack, { agentPids, bounds, withinMs: bounds.reconcileMs + 20_000 });
}
