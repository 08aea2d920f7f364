import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { expect } from 'vitest';
import { assertInvariants, ControlLog, eventually } from '@kandev/testkit';
import { makeTask, sleepScript, type World } from './support.js';
import {
  agentOf,
  ANSWER_DEADLINE_MS,
  bounds,
  CLARIFICATION_TIMEOUT_MS,
  killOrchestratorWaitingOn,
  REQUEST_TIMEOUT_MS,
  startRunning,
  WAKEUP_CLAIM_TIMEOUT_MS,
  WITHIN_MS,
} from './fault-world.js';

/**
 * The scale-out cases that are not one control request against a running agent: a wakeup's
 * dispatch, and an agent waiting on ask_user_questions. Each kills one process of a service in
 * the middle and then holds the system to what its callers were told (the invariant checker), as
 * fault-world.ts does for the control operations.
 */

const controlLog = (w: World) => new ControlLog({ gatewayUrl: w.stack.gatewayUrl, mcpUrl: w.stack.mcpUrl, operatorToken: w.token });

/** Wakeup dispatch bound: a claim lost with its holds process is claimed again, and its launch may be retried once. */
const WAKEUP_BOUND_MS = WAKEUP_CLAIM_TIMEOUT_MS + 2 * REQUEST_TIMEOUT_MS + 10_000;

/**
 * A wakeup dispatched while one process of `service` is killed (holds: the dispatcher that claimed
 * it, once it has; orchestrator: the replica deciding its launch, inside that transaction): the
 * wakeup starts exactly one session, within the claim timeout and a launch. A create answered with
 * an error is sent again with the same idempotency key and must find the same wakeup.
 */
export async function runWakeupCase(w: World, pids: Map<string, number>, service: 'holds' | 'orchestrator'): Promise<void> {
  const log = controlLog(w);
  const { task } = await makeTask(w.api);
  const key = randomUUID();
  const prompt = sleepScript(120_000, { tag: randomUUID() });
  const create = async () => {
    let created = await log.createWakeup(task.id, prompt, key);
    if (!created.answer.ok) created = await log.createWakeup(task.id, prompt, key);
    expect(created.answer, 'the wakeup create, retried once').toMatchObject({ ok: true });
    return (created.answer as { body: { id: string } }).body.id;
  };

  let wakeupId: string;
  let killed: string;
  if (service === 'orchestrator') {
    // The replica deciding the wakeup's launch, killed in its transaction: the test holds the task's row, which the launch's fence bump needs.
    let creating: Promise<string> | undefined;
    killed = await killOrchestratorWaitingOn(
      w,
      (tx) => tx`SELECT id FROM orchestrator.tasks WHERE id = ${task.id} FOR UPDATE`,
      () => {
        creating = create();
      },
    );
    [wakeupId] = await Promise.all([creating!, w.stack.restartInstance(killed)]);
  } else {
    wakeupId = await create();
    // The holds process that claimed it (the dispatcher whose launch is in flight), read from its row.
    const sql = postgres(w.stack.db.url, { max: 1, onnotice: () => undefined });
    try {
      killed = await eventually(
        async () => {
          const [row] = await sql<{ status: string; claimed_by: string | null }[]>`SELECT status, claimed_by FROM holds.wakeups WHERE id = ${wakeupId}`;
          return row && row.status !== 'queued' ? row.claimed_by : null;
        },
        WAKEUP_BOUND_MS,
        10,
      );
    } finally {
      await sql.end();
    }
    w.stack.instance(killed)!.process.kill('SIGKILL');
    await w.stack.restartInstance(killed);
  }
  const status = async () => (await w.api.get(`/wakeups/${wakeupId}`)).body as { status: string; session_id: string | null; skip_reason: string | null };

  const done = await eventually(async () => {
    const x = await status();
    return x.status === 'finished' || x.status === 'cancelled' ? x : null;
  }, WAKEUP_BOUND_MS);
  console.info(`[scale] wakeup × kill -9 of ${killed}: ${done.status} ${done.session_id}`);
  expect(done).toMatchObject({ status: 'finished', skip_reason: null });
  // Exactly once: the task has one session, the one the wakeup records.
  const sessions = (await w.api.get(`/tasks/${task.id}`)).body.sessions as Array<{ id: string }>;
  expect(sessions.map((s) => s.id)).toEqual([done.session_id]);
  await agentOf(w, pids, task.id, done.session_id!);
  await assertInvariants(w.stack, { agentPids: pids, bounds, requests: log, withinMs: WITHIN_MS });
  expect((await w.api.post(`/tasks/${task.id}/stop`)).status).toBe(200);
}

const askScript = (answerTag: string) =>
  JSON.stringify({ script: [{ ask: [{ id: 'db', text: 'Which database?' }] }, { say: `after ${answerTag}` }, { sleep_ms: 120_000 }] });

/**
 * An agent waiting on ask_user_questions while its mcp process (the one its MCP URL names) or an
 * orchestrator process is killed, and the operator answers meanwhile. The agent is never left
 * waiting in silence: with its mcp process gone it gets an error at once; with an orchestrator
 * process gone the survivor carries the wait, so the answer reaches it. The operator's answer is
 * a result or an error within its deadline (an error is retried once).
 */
export async function runClarificationCase(w: World, pids: Map<string, number>, service: 'mcp' | 'orchestrator'): Promise<void> {
  const { task } = await makeTask(w.api);
  const tag = randomUUID();
  const { pid } = await startRunning(w, pids, task.id, askScript(tag));
  const bundle = await eventually(async () => {
    const { active } = (await w.api.get(`/tasks/${task.id}/clarifications`)).body;
    return active?.waiter_live ? (active as { id: string }) : null;
  }, 45_000);

  const respond = async () => {
    const sent = Date.now();
    const r = await w.api.post(`/clarification/${bundle.id}/respond`, { answers: [{ question_id: 'db', answer: `postgres ${tag}` }] });
    expect(Date.now() - sent, 'the answer to the operator is not late').toBeLessThan(ANSWER_DEADLINE_MS);
    return r;
  };
  let first: Awaited<ReturnType<typeof respond>>;
  if (service === 'mcp') {
    // The agent's own mcp process is the first one (agents are handed its URL); the operator's answer goes out as it dies.
    const answering = respond();
    w.stack.services.get('mcp')!.process.kill('SIGKILL');
    [first] = await Promise.all([answering, w.stack.restart('mcp')]);
  } else {
    // The replica deciding the operator's answer, killed in its transaction (it locks the bundle's row).
    let responding: ReturnType<typeof respond> | undefined;
    const killed = await killOrchestratorWaitingOn(
      w,
      (tx) => tx`SELECT id FROM orchestrator.clarification_bundles WHERE id = ${bundle.id} FOR UPDATE`,
      () => {
        responding = respond();
        return responding;
      },
    );
    [first] = await Promise.all([responding!, w.stack.restartInstance(killed)]);
  }
  const answered = first.status === 200 || first.status === 409 ? first : await respond();
  console.info(
    `[scale] clarification × kill -9 of the ${service} process: respond → ${first.status}${answered === first ? '' : `, retried → ${answered.status}`} ${JSON.stringify(answered.body?.status ?? answered.body?.error)}`,
  );

  // What reached the agent: the answer, or an error (a failed tool call ends its turn). Never nothing past the bundle's expiry.
  const outcome = await eventually(async () => {
    const ev = w.agentEvents(pid);
    const result = ev.find((e) => e.kind === 'mcp_result' && e.tool === 'ask_user_questions');
    if (result) return { kind: result.is_error ? 'error' : 'result', text: String(result.text) };
    const ended = ev.find((e) => e.kind === 'turn_end');
    return ended ? { kind: 'error', text: `turn ended ${String(ended.status)}` } : null;
  }, CLARIFICATION_TIMEOUT_MS + REQUEST_TIMEOUT_MS);
  console.info(`[scale] clarification × kill -9 of the ${service} process: the agent got ${outcome.kind}: ${outcome.text.slice(0, 200)}`);
  if (service === 'orchestrator') {
    expect(answered.status).toBe(200);
    expect(outcome.kind).toBe('result');
    expect(JSON.parse(outcome.text)).toMatchObject({ bundle_id: bundle.id, status: 'answered', answers: [{ question_id: 'db', answer: `postgres ${tag}` }] });
  } else if (outcome.kind === 'result') {
    // The answer got through before the process died: it is the operator's.
    expect(JSON.parse(outcome.text)).toMatchObject({ bundle_id: bundle.id });
  }
  // Nobody is recorded as waiting any more once the waiter is gone (its lease lapses).
  await eventually(async () => !(await w.api.get(`/clarification/${bundle.id}`)).body.waiter_live, CLARIFICATION_TIMEOUT_MS);
  await assertInvariants(w.stack, { agentPids: pids, bounds, requests: [], withinMs: WITHIN_MS });
  const stopped = await w.api.post(`/tasks/${task.id}/stop`);
  expect([200, 404]).toContain(stopped.status);
}

/**
 * ADR 0037: an agent's `notifications/cancelled` that a load balancer sends to another mcp process
 * than the one holding its ask_user_questions call still ends the wait at once (the bundle shows
 * the caller gone), long before the bundle's expiry. (That a cancel under another token ends
 * nothing is services/mcp/test/ask-user-questions.test.ts.)
 */
export async function runCrossReplicaCancel(w: World, pids: Map<string, number>): Promise<void> {
  const { task } = await makeTask(w.api);
  const { sessionId } = await startRunning(w, pids, task.id);
  const token = await w.stack.agentToken(task.id, 'task', sessionId);
  const [holder, other] = [w.stack.services.get('mcp')!.urls.mcp!, w.stack.replicas('mcp')[0]!.urls.mcp!];
  const post = (url: string, bearer: string, body: unknown) =>
    fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(CLARIFICATION_TIMEOUT_MS + REQUEST_TIMEOUT_MS),
    });
  const id = `ask-${randomUUID()}`;
  const asked = Date.now();
  const pending = post(holder, token, {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name: 'ask_user_questions', arguments: { questions: [{ id: 'q', text: 'Which?' }] } },
  });
  const bundle = await eventually(async () => {
    const { active } = (await w.api.get(`/tasks/${task.id}/clarifications`)).body;
    return active?.waiter_live ? (active as { id: string }) : null;
  }, 30_000);
  const cancel = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: 'the agent moved on' } };
  expect((await post(other, token, cancel)).status).toBe(202);
  const res = await pending;
  const took = Date.now() - asked;
  expect(res.status).toBe(200);
  expect(((await res.json()) as { result: { structuredContent: unknown } }).result.structuredContent).toMatchObject({
    bundle_id: bundle.id,
    status: 'detached',
    reason: 'caller_gone',
  });
  expect(took).toBeLessThan(CLARIFICATION_TIMEOUT_MS);
  expect((await w.api.get(`/clarification/${bundle.id}`)).body).toMatchObject({ waiter_live: false, detached: true, detached_reason: 'caller_gone' });
  expect((await w.api.post(`/tasks/${task.id}/stop`)).status).toBe(200);
}
