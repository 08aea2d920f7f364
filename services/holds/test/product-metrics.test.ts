import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Holds, OrchTree, type OperatorActor } from '@kandev/contracts';
import { connectNats, createLogger, on, request, serveEndpoints, startService, type NatsConnection, type RunningService } from '@kandev/runtime';
import { createTestDatabase, metricSample, scrapeMetrics, startNats, type TestDatabase, type TestNats } from '@kandev/testkit';
import { holdsService } from '../src/service.js';

/**
 * Tokens and cost on the holds service's /metrics: each new cost event adds its tokens by kind and
 * its cents by model, once (a replayed usage event adds nothing), on real NATS and PostgreSQL with
 * the orchestrator faked at the subject level (it answers a task's lineage).
 */
const operator: OperatorActor = { type: 'operator', id: 'op', workspaces: ['*'] };
const workspace = randomUUID();
let nats: TestNats;
let db: TestDatabase;
let holds: RunningService;
let nc: NatsConnection;

beforeAll(async () => {
  [nats, db] = await Promise.all([startNats(), createTestDatabase()]);
  nc = await connectNats({ url: nats.url, name: 'holds-metrics-test' });
  await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'orch-fake', queue: 'orchestrator', log: createLogger('fake-orch', 'silent') }, [
    on(OrchTree.lineage, async (req) => [{ id: req.task_id, workspace_id: workspace, parent_id: null }]),
  ]);
  holds = await startService(holdsService, { ...process.env, NATS_URL: nats.url, DATABASE_URL: db.url, LOG_LEVEL: 'silent', INSTANCE_ID: 'holds-m1' });
});
afterAll(async () => {
  await holds?.stop();
  await nc?.close();
  await Promise.all([nats?.stop(), db?.drop()]);
});

const task = randomUUID();
const record = (usage_event_id: string, model: string | undefined) =>
  request(nc, Holds.costRecord, {
    actor: operator,
    task_id: task,
    usage_event_id,
    ...(model ? { model } : {}),
    cost_cents: 12.5,
    tokens_in: 100,
    tokens_cached_in: 40,
    tokens_out: 7,
  });

describe('product metrics (holds)', () => {
  it('adds a new cost event’s tokens and cents by model, and a replayed one not again', async () => {
    const model = `model-${randomUUID().slice(0, 8)}`;
    const usage = randomUUID();
    expect((await record(usage, model)).duplicate).toBe(false);
    let page = await scrapeMetrics(holds.healthUrl);
    expect(metricSample(page, 'kandev_tokens_total', { model, kind: 'input' })).toBe(100);
    expect(metricSample(page, 'kandev_tokens_total', { model, kind: 'cached_input' })).toBe(40);
    expect(metricSample(page, 'kandev_tokens_total', { model, kind: 'output' })).toBe(7);
    expect(metricSample(page, 'kandev_cost_cents_total', { model })).toBe(12.5);

    expect((await record(usage, model)).duplicate).toBe(true);
    page = await scrapeMetrics(holds.healthUrl);
    expect(metricSample(page, 'kandev_cost_cents_total', { model })).toBe(12.5);

    // An event with no model is counted under `none`, never dropped.
    await record(randomUUID(), undefined);
    expect(metricSample(await scrapeMetrics(holds.healthUrl), 'kandev_cost_cents_total', { model: 'none' })).toBeGreaterThanOrEqual(12.5);
  });
});
