import { randomUUID } from 'node:crypto';
import { OrchMcp, OrchMcpCoord, type Endpoint } from '@kandev/contracts';
import {
  connectNats,
  createLogger,
  on,
  serveEndpoints,
  signAgentToken,
  startService,
  type Handler,
  type NatsConnection,
  type RunningService,
} from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Service } from '@nats-io/services';
import { mcpService } from '../src/service.js';

export const SECRET = 'test-secret-0123456789';

/** What the orchestrator received on the wire, before any schema parsing. */
export interface WireRequest {
  subject: string;
  body: Record<string, unknown>;
}

type Endpoints = typeof OrchMcp & typeof OrchMcpCoord;
type Handlers = { -readonly [K in keyof Endpoints]?: Handler<Endpoints[K]> };

/**
 * A real nats-server, the mcp service in-process, and an orchestrator faked at the subject
 * level: tests swap its handlers and read every raw request it was sent.
 */
export class Harness {
  wire: WireRequest[] = [];
  handlers: Handlers = {};
  private constructor(
    readonly nats: TestNats,
    readonly nc: NatsConnection,
    readonly mcp: RunningService,
    private fake: Service | null,
    private recorder: { unsubscribe(): void } | null,
  ) {}

  get url(): string {
    return this.mcp.urls.mcp!;
  }

  static async start(env: Record<string, string> = {}): Promise<Harness> {
    const nats = await startNats();
    const nc = await connectNats({ url: nats.url, name: 'fake-orchestrator' });
    const mcp = await startService(mcpService, {
      ...process.env,
      NATS_URL: nats.url,
      MCP_PORT: '0',
      LOG_LEVEL: 'silent',
      KANDEV_JWT_SECRET: SECRET,
      REQUEST_TIMEOUT_MS: '2000',
      // The per-token rate is off unless a test sets it (test/rate-limit.test.ts): bursts of calls are not what the others test.
      KANDEV_AGENT_RATE: '0',
      ...env,
    });
    const h = new Harness(nats, nc, mcp, null, null);
    const recorder = nc.subscribe('kandev.orch.mcp.>', {
      callback: (_err, msg) => {
        h.wire.push({ subject: msg.subject, body: JSON.parse(new TextDecoder().decode(msg.data)) });
      },
    });
    const delegate = <E extends Endpoint>(endpoint: E, key: keyof Endpoints) =>
      on(endpoint, (req, ctx) => {
        const handler = h.handlers[key] as Handler<E> | undefined;
        if (!handler) throw new Error(`no fake handler for ${String(key)}`);
        return handler(req, ctx);
      });
    const fake = await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake', queue: 'orchestrator', log: createLogger('fake', 'silent') }, [
      delegate(OrchMcp.stopChildTask, 'stopChildTask'),
      delegate(OrchMcp.messageTask, 'messageTask'),
      delegate(OrchMcp.createTask, 'createTask'),
      delegate(OrchMcp.whoami, 'whoami'),
      delegate(OrchMcpCoord.listChildren, 'listChildren'),
      delegate(OrchMcpCoord.childConversation, 'childConversation'),
      delegate(OrchMcpCoord.spawnSession, 'spawnSession'),
    ]);
    await nc.flush();
    h.fake = fake;
    h.recorder = recorder;
    return h;
  }

  reset(): void {
    this.wire = [];
    this.handlers = {};
  }

  /** Take the orchestrator away: no responders on its subjects any more. */
  async removeOrchestrator(): Promise<void> {
    await this.fake?.stop();
    this.recorder?.unsubscribe();
    this.fake = null;
    this.recorder = null;
    await this.nc.flush();
  }

  async stop(): Promise<void> {
    await this.mcp?.stop();
    await this.nc?.close();
    await this.nats?.stop();
  }
}

export const agentToken = (claims: { task_id: string; session_id?: string; mode?: 'task' | 'config' | 'office' | 'external' }, ttl?: string) =>
  signAgentToken(SECRET, claims, ttl);

/** The SDK's own client over Streamable HTTP, authenticated with a bearer header. */
export async function connectClient(url: string, token: string | null, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'mcp-service-test', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers } },
  });
  await client.connect(transport);
  return client;
}

export const uuid = () => randomUUID();

export function fakeTask(over: Partial<Record<string, unknown>> = {}) {
  const now = new Date().toISOString();
  return {
    id: uuid(),
    workspace_id: uuid(),
    parent_id: null as string | null,
    title: 'a task',
    description: null,
    status: 'TODO' as const,
    office: false,
    agent: null,
    archived_at: null,
    cancelled_at: null,
    created_at: now,
    updated_at: now,
    ...over,
  };
}
