import { createTestDatabase, eventually, startNats } from '@kandev/testkit';
import { connectNats, request, signAgentToken, startService, type DbDebug, type NatsConnection, type RunningService } from '@kandev/runtime';
import { Orch, OrchMcp, type McpMode, type OperatorActor } from '@kandev/contracts';
import postgres from 'postgres';
import { orchestratorService } from '../src/service.js';
import { FakeLifecycle } from './fake-lifecycle.js';

export const operator: OperatorActor = { type: 'operator', id: 'op-1', workspaces: ['*'] };
/** The services' JWT secret in these tests (vitest.config.ts sets it in the environment). */
export const SECRET = process.env.KANDEV_JWT_SECRET ?? 'vitest-secret-0123456789abcdef';
/** The token the mcp service would forward for this calling task. */
export const agentToken = (task_id: string, mode: McpMode = 'task', ttl = '1h') => signAgentToken(SECRET, { task_id, mode }, ttl);

/** How long the orchestrator under test waits for a lifecycle cancel answer, and for a prompt hand-off, while holding the session's guard. */
export const LIFECYCLE_CANCEL_WAIT_MS = 1_500;
export const LIFECYCLE_PROMPT_WAIT_MS = 1_500;

/**
 * A real orchestrator (in-process) on a real nats-server and a fresh database, with a fake lifecycle.
 * `dbDebug` sees every statement the orchestrator's pool sends, in the order it sends them.
 */
export async function startHarness(env: Record<string, string> = {}, opts: { dbDebug?: DbDebug } = {}) {
  const [nats, db] = await Promise.all([startNats(), createTestDatabase()]);
  const svc: RunningService = await startService(
    orchestratorService,
    {
      ...process.env,
      NATS_URL: nats.url,
      DATABASE_URL: db.url,
      KANDEV_JWT_SECRET: SECRET,
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
      INSTANCE_ID: 'orch-test',
      RECONCILE_INTERVAL_MS: '3600000',
      AGENT_CATALOGUE_TTL_MS: '200',
      LIFECYCLE_CANCEL_WAIT_MS: String(LIFECYCLE_CANCEL_WAIT_MS),
      LIFECYCLE_PROMPT_WAIT_MS: String(LIFECYCLE_PROMPT_WAIT_MS),
      ...env,
    },
    opts,
  );
  const nc: NatsConnection = await connectNats({ url: nats.url, name: 'orch-test-client' });
  const life = new FakeLifecycle(nc);
  await life.start();
  const sql = postgres(db.url, { max: 2, onnotice: () => undefined });
  const h = {
    svc,
    nats,
    db,
    nc,
    life,
    sql,
    async workspace(name = 'ws') {
      return request(nc, Orch.workspaceCreate, { actor: operator, name });
    },
    async task(workspace_id: string, title: string, parent_id: string | null = null, extra: { office?: boolean } = {}) {
      return request(nc, Orch.taskCreate, { actor: operator, workspace_id, title, parent_id, ...extra });
    },
    async startSession(task_id: string, prompt?: string) {
      return request(nc, Orch.sessionStart, { actor: operator, task_id, ...(prompt ? { prompt } : {}) });
    },
    async getTask(task_id: string) {
      return request(nc, Orch.taskGet, { actor: operator, task_id });
    },
    async stopChild(caller_task_id: string, task_id: string) {
      return request(nc, OrchMcp.stopChildTask, { caller_task_id, agent_token: await agentToken(caller_task_id), task_id });
    },
    async message(caller_task_id: string, task_id: string, prompt: string, delivery_mode?: 'queued' | 'interrupt', idempotency_key?: string) {
      return request(nc, OrchMcp.messageTask, {
        caller_task_id,
        agent_token: await agentToken(caller_task_id),
        task_id,
        prompt,
        ...(delivery_mode ? { delivery_mode } : {}),
        ...(idempotency_key ? { idempotency_key } : {}),
      });
    },
    async createChild(caller_task_id: string, fields: { title: string; agent?: string; prompt?: string; idempotency_key?: string }) {
      return request(nc, OrchMcp.createTask, { caller_task_id, agent_token: await agentToken(caller_task_id), ...fields });
    },
    /**
     * A child stop answers at commit and its teardown requests follow it: wait until each of these
     * executions has been asked to stop (bounded by a NATS request's own time, with headroom).
     */
    async teardownsOf(executionIds: readonly string[]) {
      return eventually(
        async () =>
          executionIds.every((id) => life.stops.some((s) => s.execution_id === id)) ? life.stops.filter((s) => executionIds.includes(s.execution_id)) : null,
        5_000,
        5,
      );
    },
    /** Every row of the orchestrator's tables, to compare before and after a refused request. */
    async snapshot() {
      const tables = ['workspaces', 'tasks', 'sessions', 'turns', 'queued_messages', 'audit_log', 'idempotency_keys'];
      const out: Record<string, unknown[]> = {};
      for (const t of tables) out[t] = await sql.unsafe(`SELECT * FROM orchestrator.${t} ORDER BY 1, 2`);
      // Events staged for publication (publication itself updates published_at, so only what was staged).
      out.outbox = await sql.unsafe(`SELECT id, subject FROM orchestrator.outbox ORDER BY id`);
      return out;
    },
    async stop() {
      await sql.end();
      await nc.close();
      await svc.stop();
      await Promise.all([nats.stop(), db.drop()]);
    },
  };
  return h;
}
export type Harness = Awaited<ReturnType<typeof startHarness>>;
