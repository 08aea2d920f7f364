import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, processAlive } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * end to end: a stubborn agent (it ignores the cancel and SIGTERM) is gone within
 * TEARDOWN_GRACE_MS + 1 s of its logical cancel, whatever the cancel timeout; an operator's cancel
 * it does not acknowledge answers the escalation and is recorded as a stop, not a crash.
 *
 * The cancel timeout is longer than the grace on purpose: before the fix agentctl waited
 * min(grace, cancel timeout) for the turn and then SIGTERM and the whole grace again (a stubborn
 * agent lived twice the grace: 4.08 s with a grace of 2 s), and an unacknowledged cancel escalated
 * to the same schedule after its own wait.
 */
const GRACE_MS = 2_000;
const CANCEL_TIMEOUT_MS = 2_500;
/** The SPEC bound, plus what a poll every 10 ms and a loaded 2-core machine add to observing it. */
const BOUND_MS = GRACE_MS + 1_000;
const OBSERVE_MS = 400;

let w: World;
beforeAll(async () => {
  w = await startWorld({ TEARDOWN_GRACE_MS: String(GRACE_MS), CANCEL_TIMEOUT_MS: String(CANCEL_TIMEOUT_MS) });
});
afterAll(async () => w?.stop());

const STUBBORN = sleepScript(60_000, { ignore_cancel: true, ignore_sigterm: true });

/** When the process was first seen gone (Date.now()), polled every 10 ms. */
const goneAt = (pid: number, timeoutMs: number) => eventually(async () => (processAlive(pid) ? null : Date.now()), timeoutMs, 10);

async function stubbornSession() {
  const { task } = await makeTask(w.api, { title: 'stubborn' });
  const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: STUBBORN });
  const pid = await eventually(async () => {
    const s = (await w.api.get(`/sessions/${session.id}`)).body;
    return s.execution?.status === 'RUNNING' ? (s.execution.pid as number) : null;
  });
  return { task, session, pid };
}

describe('teardown bound (R-10.5)', () => {
  it('a tree pause: the stubborn agent is SIGKILLed within the grace + 1 s of its session turning CANCELLED', async () => {
    const { task, session, pid } = await stubbornSession();
    await w.api.ok('POST', `/tasks/${task.id}/tree/pause`, { reason: 'bound' });
    const gone = await goneAt(pid, GRACE_MS + 15_000);
    const s = (await w.api.get(`/sessions/${session.id}`)).body;
    expect(s.state).toBe('CANCELLED');
    const lived = gone - Date.parse(s.completed_at as string);
    console.info(
      `[timing] tree pause: stubborn agent gone ${lived} ms after its logical cancel (grace ${GRACE_MS} ms, cancel timeout ${CANCEL_TIMEOUT_MS} ms)`,
    );
    expect(lived).toBeLessThan(BOUND_MS + OBSERVE_MS);
    expect(w.agentEvents(pid).map((e) => e.kind)).toContain('sigterm_ignored');
    await w.api.ok('POST', `/tasks/${task.id}/tree/resume`, {});
  });

  it('an unacknowledged cancel answers 409 naming the escalation; the session is CANCELLED (not FAILED), the task follows the stop rule, the agent is gone within the bound', async () => {
    const { task, session, pid } = await stubbornSession();
    const t0 = Date.now();
    const res = await w.api.post(`/sessions/${session.id}/cancel`);
    const answered = Date.now();
    expect(res.status).toBe(409);
    expect(res.body.error).toMatchObject({
      code: 'CONFLICT',
      message: expect.stringMatching(/acknowledge.*being torn down/),
      details: { escalation: 'teardown', reason: 'cancel_unacknowledged', session_id: session.id, session_state: 'CANCELLED', grace_ms: GRACE_MS },
    });
    expect(answered - t0).toBeLessThan(CANCEL_TIMEOUT_MS + 3_000);
    const gone = await goneAt(pid, GRACE_MS + 15_000);
    const s = (await w.api.get(`/sessions/${session.id}`)).body;
    expect(s).toMatchObject({ state: 'CANCELLED', error_message: null });
    // The logical cancel is the CANCELLED write (stamped when it was decided, just before the 409).
    const lived = gone - Date.parse(s.completed_at as string);
    console.info(
      `[timing] unacknowledged cancel: stubborn agent gone ${lived} ms after its logical cancel, ${gone - answered} ms after the 409 (grace ${GRACE_MS} ms, cancel timeout ${CANCEL_TIMEOUT_MS} ms)`,
    );
    expect(Date.parse(s.completed_at as string)).toBeGreaterThanOrEqual(t0 + CANCEL_TIMEOUT_MS - 100);
    expect(lived).toBeLessThan(BOUND_MS + OBSERVE_MS);
    // R-1.4's rule, as for a stop (IN_PROGRESS, not office, nothing else working → REVIEW), and the
    // execution's end does not rewrite the session as a crash.
    // (Written in its own transaction right after the cancel's, before the answer.)
    expect((await w.api.get(`/tasks/${task.id}`)).body.status).toBe('REVIEW');
    await eventually(async () => ((await w.api.get(`/sessions/${session.id}`)).body.execution === null ? true : null), 15_000);
    expect((await w.api.get(`/sessions/${session.id}`)).body).toMatchObject({ state: 'CANCELLED', error_message: null });
    const audit = (await w.api.get(`/tasks/${task.id}/audit`)).body as Array<{ action: string; outcome: string }>;
    expect(audit.find((a) => a.action === 'agent.cancel')).toMatchObject({ outcome: 'escalated' });
  });
});
