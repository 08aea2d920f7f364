import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcp, eventually, metricSample, processAlive, WsClient, type StackService } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * The metrics ops dashboards and alerts read (deploy/overlays/prod/monitoring.yaml) move under a
 * real workload: each service's /metrics after HTTP and /ws requests, an MCP tool call, launches
 * (one refused for capacity), a tree pause and a stop that has to SIGKILL an agent.
 */
let w: World;
beforeAll(async () => {
  // One launch at a time and no queue: a second concurrent start is refused for capacity.
  w = await startWorld({ LAUNCH_CONCURRENCY: '1', LAUNCH_QUEUE_WAIT_MS: '0', TEARDOWN_GRACE_MS: '300' });
});
afterAll(async () => w?.stop());

const sample = metricSample;
const scrape = async (service: StackService) => (await fetch(`${w.stack.services.get(service)!.urls.health}/metrics`)).text();

describe('metrics under a workload', () => {
  it('each service reports what it did', async () => {
    const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker' });
    // A stubborn agent: SIGTERM is ignored, so the stop escalates to SIGKILL.
    const session = await w.api.ok('POST', `/tasks/${child.id}/sessions`, { prompt: sleepScript(60_000, { ignore_sigterm: true }) });
    const pid = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution?.pid as number | undefined, 30_000);
    // Capacity: the only launch slot is taken a moment longer by a concurrent pair of starts.
    const { task: other } = await makeTask(w.api, { workspace_id });
    const { task: another } = await makeTask(w.api, { workspace_id });
    const burst = await Promise.all([other, another].map((t) => w.api.post(`/tasks/${t.id}/sessions`, { prompt: sleepScript(60_000) })));
    expect(burst.map((r) => r.status).sort()).toContain(503);

    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    await ws.request('subscribe', { task_id: child.id });
    ws.close();
    const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(parent.id));
    expect((await mcp.callJson('message_task_kandev', { task_id: child.id, prompt: 'later' })).json.status).toBe('queued');
    await mcp.close();
    expect((await w.api.post(`/tasks/${parent.id}/tree/pause`, { reason: 'metrics' })).status).toBe(200);
    await eventually(async () => !processAlive(pid), 30_000);

    const gateway = await scrape('gateway');
    const route = { http_route: '/tasks/:id/sessions', http_request_method: 'POST' };
    expect(sample(gateway, 'http_server_request_duration_seconds_count', { ...route, http_response_status_code: '201' })).toBeGreaterThanOrEqual(1);
    expect(sample(gateway, 'http_server_request_duration_seconds_count', { http_response_status_code: '503' })).toBeGreaterThanOrEqual(1);
    expect(sample(gateway, 'kandev_ws_action_duration_seconds_count', { action: 'subscribe', code: 'OK' })).toBe(1);

    const mcpPage = await scrape('mcp');
    expect(sample(mcpPage, 'kandev_mcp_tool_duration_seconds_count', { tool: 'message_task_kandev', code: 'OK' })).toBe(1);
    expect(
      sample(mcpPage, 'http_server_request_duration_seconds_count', { http_route: '/mcp', http_request_method: 'POST', http_response_status_code: '200' }),
    ).toBeGreaterThanOrEqual(1);

    const orchestrator = await scrape('orchestrator');
    expect(sample(orchestrator, 'kandev_hold_members_count', { mode: 'pause' })).toBe(1);
    expect(sample(orchestrator, 'kandev_hold_members_sum', { mode: 'pause' })).toBe(2);
    expect(sample(orchestrator, 'kandev_request_duration_seconds_count', { endpoint: 'orch.tree.pause', code: 'OK' })).toBe(1);
    expect(sample(orchestrator, 'kandev_outbox_oldest_age_seconds')).not.toBeNull();

    const lifecycle = await eventually(async () => {
      const page = await scrape('lifecycle');
      return (sample(page, 'kandev_teardown_escalations_total') ?? 0) >= 1 ? page : null;
    }, 30_000);
    expect(sample(lifecycle, 'kandev_launch_refusals_total')).toBeGreaterThanOrEqual(1);
    expect(sample(lifecycle, 'kandev_launch_wait_seconds_count')).toBeGreaterThanOrEqual(2);
    expect(sample(lifecycle, 'kandev_teardown_duration_seconds_count', { how: 'killed' })).toBeGreaterThanOrEqual(1);
    expect(sample(lifecycle, 'kandev_live_executions')).not.toBeNull();
    expect(sample(lifecycle, 'kandev_launch_queue_depth')).toBe(0);

    expect(sample(await scrape('holds'), 'kandev_wakeup_backlog')).toBe(0);
  });

  it('product metrics follow a session: started, a question pending then answered, a turn, a stop, tokens and cost, /ws and MCP in flight', async () => {
    const gatewayBefore = await scrape('gateway');
    const orchBefore = await scrape('orchestrator');
    const before = {
      started: sample(orchBefore, 'kandev_sessions_started_total', { agent: 'scripted-acp' }) ?? 0,
      turns: sample(orchBefore, 'kandev_turn_duration_seconds_count', { agent: 'scripted-acp' }) ?? 0,
      stops: sample(orchBefore, 'kandev_session_stops_total', { source: 'operator' }) ?? 0,
      ws: sample(gatewayBefore, 'kandev_ws_connections') ?? 0,
    };
    const { task } = await makeTask(w.api, { agent: 'scripted-acp' });
    const ws = await WsClient.connect(w.stack.wsUrl, w.token);
    try {
      await ws.request('subscribe', { task_id: task.id });
      expect(sample(await scrape('gateway'), 'kandev_ws_connections')).toBe(before.ws + 1);
      // The first turn asks a question (ask_user_questions holds its MCP call open until answered),
      // then ends; the session waits for input until the operator stops it.
      const prompt = JSON.stringify({ script: [{ ask: [{ id: 'db', text: 'Which database?' }] }, { say: 'answered' }] });
      const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt });
      expect(sample(await scrape('orchestrator'), 'kandev_sessions_started_total', { agent: 'scripted-acp' })).toBe(before.started + 1);
      const bundle = await eventually(async () => {
        const { active } = (await w.api.get(`/tasks/${task.id}/clarifications`)).body;
        return active?.waiter_live ? active : null;
      }, 45_000);
      const waiting = await eventually(async () => {
        const page = await scrape('orchestrator');
        return (sample(page, 'kandev_pending_question_bundles') ?? 0) >= 1 ? page : null;
      }, 10_000);
      expect(sample(waiting, 'kandev_pending_question_oldest_age_seconds')).toBeGreaterThanOrEqual(0);
      const mcpWaiting = await scrape('mcp');
      expect(sample(mcpWaiting, 'kandev_mcp_tool_calls_in_flight')).toBeGreaterThanOrEqual(1);
      expect(sample(mcpWaiting, 'kandev_mcp_requests_in_flight')).toBeGreaterThanOrEqual(1);

      expect((await w.api.post(`/clarification/${bundle.id}/respond`, { answers: [{ question_id: 'db', answer: 'postgres' }] })).status).toBe(200);
      await eventually(async () => ((sample(await scrape('orchestrator'), 'kandev_pending_question_bundles') ?? 0) === 0 ? true : null), 10_000);
      await eventually(async () => ((sample(await scrape('mcp'), 'kandev_mcp_tool_calls_in_flight') ?? 0) === 0 ? true : null), 10_000);

      await eventually(async () => {
        const page = await scrape('orchestrator');
        return (sample(page, 'kandev_turn_duration_seconds_count', { agent: 'scripted-acp' }) ?? 0) === before.turns + 1 ? page : null;
      }, 30_000);
      expect((await w.api.post(`/tasks/${task.id}/stop`, {})).status).toBe(200);
      expect(sample(await scrape('orchestrator'), 'kandev_session_stops_total', { source: 'operator' })).toBe(before.stops + 1);
      expect((await w.api.get(`/sessions/${session.id}`)).body.state).toBe('CANCELLED');

      const model = `e2e-${randomUUID().slice(0, 8)}`;
      await w.api.ok('POST', '/cost-events', {
        task_id: task.id,
        usage_event_id: randomUUID(),
        model,
        cost_cents: 30,
        tokens_in: 10,
        tokens_cached_in: 0,
        tokens_out: 5,
      });
      const holds = await scrape('holds');
      expect(sample(holds, 'kandev_cost_cents_total', { model })).toBe(30);
      expect(sample(holds, 'kandev_tokens_total', { model, kind: 'output' })).toBe(5);
    } finally {
      ws.close();
    }
    await eventually(async () => (sample(await scrape('gateway'), 'kandev_ws_connections') === before.ws ? true : null), 10_000);
  });
});
