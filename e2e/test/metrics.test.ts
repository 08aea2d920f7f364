import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcp, eventually, processAlive, WsClient, type StackService } from '@kandev/testkit';
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

/** One sample's value from a Prometheus text page, summed over the series whose labels include `labels`. */
function sample(page: string, name: string, labels: Record<string, string> = {}): number | null {
  let total: number | null = null;
  for (const line of page.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-z_:]+)(\{[^}]*\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const set = m[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => set.includes(`${k}="${v}"`))) total = (total ?? 0) + Number(m[3]);
  }
  return total;
}
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
    expect(sample(gateway, 'kandev_http_request_duration_seconds_count', { route: '/tasks/:id/sessions', code: '201' })).toBeGreaterThanOrEqual(1);
    expect(sample(gateway, 'kandev_http_request_duration_seconds_count', { code: '503' })).toBeGreaterThanOrEqual(1);
    expect(sample(gateway, 'kandev_ws_action_duration_seconds_count', { action: 'subscribe', code: 'OK' })).toBe(1);

    expect(sample(await scrape('mcp'), 'kandev_mcp_tool_duration_seconds_count', { tool: 'message_task_kandev', code: 'OK' })).toBe(1);

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
});
