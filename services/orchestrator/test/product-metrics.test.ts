import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KandevError, Orch, OrchBudget, OrchClarification, OrchMcpClarification, OrchPermission, OrchTree } from '@kandev/contracts';
import { EventPublisher, request } from '@kandev/runtime';
import { eventually, metricSample, scrapeMetrics } from '@kandev/testkit';
import { FakeAgentPermissions } from './fake-permissions.js';
import { agentToken, operator, startHarness, type Harness } from './harness.js';

/**
 * The orchestrator's product metrics move when their events happen, read from its own /metrics as
 * Prometheus reads them: sessions started and failed by agent, stops by who asked (operator, parent
 * agent, tree hold, budget), cancels, turn duration, and the questions waiting on people (read from
 * the database at scrape time).
 */
let h: Harness;
let agent: FakeAgentPermissions;
beforeAll(async () => {
  h = await startHarness();
  agent = new FakeAgentPermissions(h.nc);
  await agent.start();
});
afterAll(async () => h?.stop());

const scrape = () => scrapeMetrics(h.svc.healthUrl);
/** A metric's value now (0 when it has no series yet), to compare before and after an event. */
const value = async (name: string, labels: Record<string, string> = {}) => metricSample(await scrape(), name, labels) ?? 0;
/** Wait until the metric has moved by `by` from `before` (events are consumed asynchronously). */
const movedBy = (name: string, labels: Record<string, string>, before: number, by: number) =>
  eventually(async () => ((await value(name, labels)) - before === by ? true : null), 10_000, 20);
const execOf = (sessionId: string) => [...h.life.registry.values()].find((e) => e.session_id === sessionId)!;

async function running(title: string, parent_id: string | null = null) {
  const ws = await h.workspace();
  const task = await h.task(ws.id, title, parent_id);
  const session = await h.startSession(task.id, 'work');
  return { ws, task, session };
}

describe('product metrics (orchestrator)', () => {
  it('counts a started session by its agent and a failed one by agent and reason', async () => {
    const agent = { agent: 'scripted-acp' };
    const started = await value('kandev_sessions_started_total', agent);
    const failed = await value('kandev_sessions_failed_total', { ...agent, reason: 'execution_exited' });
    const { ws, task, session } = await running('fails');
    expect(await value('kandev_sessions_started_total', agent)).toBe(started + 1);
    // The agent exits with an error, nobody having asked it to stop.
    await new EventPublisher(h.nc).emit(
      'execution.stopped',
      { workspace_id: ws.id, task_id: task.id, session_id: session.id },
      { execution_id: execOf(session.id).execution_id, how: 'exited', grace_ms: 0, reason: 'test', pid: null, exit_code: 1, signal: null },
    );
    await movedBy('kandev_sessions_failed_total', { ...agent, reason: 'execution_exited' }, failed, 1);
  });

  it('counts a failed launch as launch_failed, under the agent it was for', async () => {
    const labels = { agent: 'scripted-codex', reason: 'launch_failed' };
    const before = await value('kandev_sessions_failed_total', labels);
    const ws = await h.workspace();
    const task = await request(h.nc, Orch.taskCreate, {
      actor: operator,
      workspace_id: ws.id,
      title: 'launch fails',
      parent_id: null,
      agent: 'scripted-codex',
    });
    h.life.launchFails = new KandevError('INTERNAL_ERROR', 'agent binary missing');
    try {
      await expect(h.startSession(task.id, 'work')).rejects.toMatchObject({ code: 'INTERNAL_ERROR' });
    } finally {
      h.life.launchFails = null;
    }
    expect(await value('kandev_sessions_failed_total', labels)).toBe(before + 1);
    expect(await value('kandev_sessions_started_total', { agent: 'scripted-codex' })).toBeGreaterThanOrEqual(1);
  });

  it('observes a turn when it ends', async () => {
    const before = await value('kandev_turn_duration_seconds_count', { agent: 'scripted-acp' });
    const { ws, task, session } = await running('one turn');
    const e = execOf(session.id);
    await new EventPublisher(h.nc).emit(
      'turn.completed',
      { workspace_id: ws.id, task_id: task.id, session_id: session.id },
      { execution_id: e.execution_id, turn_id: e.turn_id!, stop_reason: 'end_turn' },
    );
    await movedBy('kandev_turn_duration_seconds_count', { agent: 'scripted-acp' }, before, 1);
  });

  it('counts stops by who asked: operator, parent agent, tree hold, budget', async () => {
    const stops = (source: string) => value('kandev_session_stops_total', { source });
    const before = {
      operator: await stops('operator'),
      parent_agent: await stops('parent_agent'),
      tree_hold: await stops('tree_hold'),
      budget: await stops('budget'),
    };

    const byOperator = await running('operator stops me');
    await request(h.nc, Orch.taskStop, { actor: operator, task_id: byOperator.task.id });
    expect(await stops('operator')).toBe(before.operator + 1);

    const parent = await running('parent');
    const child = await h.task(parent.ws.id, 'child', parent.task.id);
    await h.startSession(child.id, 'work');
    expect((await h.stopChild(parent.task.id, child.id)).status).toBe('stopped');
    expect(await stops('parent_agent')).toBe(before.parent_agent + 1);

    const held = await running('paused tree');
    await request(h.nc, OrchTree.pause, { actor: operator, task_id: held.task.id });
    expect(await stops('tree_hold')).toBe(before.tree_hold + 1);

    const spent = await running('over budget');
    const budget = { task_id: spent.task.id, limit_cents: 100, warn_percent: 80, spent_cents: 150, state: 'exceeded' as const, hold_id: null };
    await request(h.nc, OrchBudget.crossed, { task_id: spent.task.id, crossing: 'exceeded', key: `budget-${spent.task.id}`, budget });
    expect(await stops('budget')).toBe(before.budget + 1);
    // Nothing was counted twice or under another source.
    expect(await stops('operator')).toBe(before.operator + 1);
    expect(await stops('tree_hold')).toBe(before.tree_hold + 1);
  });

  it("counts an operator's cancel of a turn", async () => {
    const before = await value('kandev_turn_cancels_total', { source: 'operator' });
    const { session } = await running('cancel my turn');
    await request(h.nc, Orch.agentCancel, { actor: operator, session_id: session.id });
    expect(await value('kandev_turn_cancels_total', { source: 'operator' })).toBe(before + 1);
  });

  it('reports pending question bundles from the database, and their age, until answered', async () => {
    const before = await value('kandev_pending_question_bundles');
    const { task, session } = await running('asks');
    const wait = await request(h.nc, OrchMcpClarification.ask, {
      caller_task_id: task.id,
      agent_token: await agentToken(task.id),
      caller_session_id: session.id,
      questions: [{ id: 'q', text: 'which way?' }],
    });
    await movedBy('kandev_pending_question_bundles', {}, before, 1);
    expect(await value('kandev_pending_question_oldest_age_seconds')).toBeGreaterThanOrEqual(0);
    expect(metricSample(await scrape(), 'kandev_pending_permission_requests')).not.toBeNull();
    await request(h.nc, OrchClarification.respond, { actor: operator, bundle_id: wait.bundle.id, answers: [{ question_id: 'q', answer: 'left' }] });
    await movedBy('kandev_pending_question_bundles', {}, before, 0);
  });

  it('reports pending permission requests from the database until decided', async () => {
    const before = await value('kandev_pending_permission_requests');
    const { ws, task, session } = await running('asks permission');
    const e = execOf(session.id);
    const { permission_id } = await agent.ask({ workspace_id: ws.id, task_id: task.id, session_id: session.id }, e.execution_id, e.turn_id);
    await movedBy('kandev_pending_permission_requests', {}, before, 1);
    const row = await eventually(
      async () => (await request(h.nc, OrchPermission.ofTask, { actor: operator, task_id: task.id })).find((p) => p.permission_id === permission_id) ?? null,
      10_000,
      10,
    );
    await request(h.nc, OrchPermission.respond, { actor: operator, permission_request_id: row.id, option_id: 'allow' });
    await movedBy('kandev_pending_permission_requests', {}, before, 0);
  });
});
