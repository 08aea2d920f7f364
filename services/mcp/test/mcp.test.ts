import { KandevError, OrchMcp } from '@kandev/contracts';
import { signOperatorToken, signAgentToken } from '@kandev/runtime';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { hostileTokens } from '@kandev/testkit';
import { agentToken, connectClient, fakeTask, Harness, SECRET, uuid } from './harness.js';

type ToolResult = { isError?: boolean; content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, unknown> };
const call = async (client: Client, name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: args })) as ToolResult;
const textOf = (r: ToolResult) => r.content.find((c) => c.type === 'text')?.text ?? '';

const TASK_TOOLS = [
  'ask_user_questions',
  'create_task_kandev',
  'get_task_conversation_kandev',
  'list_tasks_kandev',
  'message_task_kandev',
  'spawn_session_kandev',
  'stop_task_kandev',
];

let h: Harness;
const clients: Client[] = [];
async function clientFor(mode: 'task' | 'config' | 'office' | 'external', taskId = uuid(), sessionId?: string) {
  const client = await connectClient(h.url, await agentToken({ task_id: taskId, mode, ...(sessionId ? { session_id: sessionId } : {}) }));
  clients.push(client);
  return client;
}

beforeAll(async () => {
  h = await Harness.start();
});
afterEach(async () => {
  h.reset();
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => undefined)));
});
afterAll(async () => {
  await h?.stop();
});

describe('service', () => {
  it('reports its MCP url and answers /healthz without a token', async () => {
    expect(h.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    const res = await fetch(new URL('/healthz', h.url));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });
});

describe('task mode', () => {
  it('lists the task tools with their annotations, and only those plus whoami', async () => {
    const client = await clientFor('task');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TASK_TOOLS, 'whoami_kandev']);

    const stop = tools.find((t) => t.name === 'stop_task_kandev')!;
    expect(stop.annotations).toEqual({ title: expect.any(String), destructiveHint: true, idempotentHint: true, readOnlyHint: false, openWorldHint: false });
    expect(stop.inputSchema).toMatchObject({ type: 'object', required: ['task_id'] });
    expect(Object.keys(stop.inputSchema.properties ?? {})).toEqual(['task_id']);

    const message = tools.find((t) => t.name === 'message_task_kandev')!;
    expect(Object.keys(message.inputSchema.properties ?? {}).sort()).toEqual(['delivery_mode', 'idempotency_key', 'prompt', 'session_id', 'task_id']);
    expect(message.inputSchema.required?.slice().sort()).toEqual(['prompt', 'task_id']);
    expect(message.inputSchema.properties?.['delivery_mode']).toMatchObject({ enum: ['queued', 'interrupt'] });
    expect(message.annotations).toMatchObject({ readOnlyHint: false, openWorldHint: false });

    const create = tools.find((t) => t.name === 'create_task_kandev')!;
    expect(create.inputSchema.required).toEqual(['title']);
    expect(Object.keys(create.inputSchema.properties ?? {}).sort()).toEqual(['agent', 'description', 'idempotency_key', 'prompt', 'title']);
  });

  it('states who may send what in message_task_kandev (docs/security.md): interrupt only to direct children, queued to any task of the workspace', async () => {
    const client = await clientFor('task');
    const { tools } = await client.listTools();
    const text = tools.find((t) => t.name === 'message_task_kandev')!.description!;
    expect(text).toMatch(/interrupt only to your direct children/);
    expect(text).toMatch(/queued message may go to any task in your workspace/);
  });

  it('tells the agent when to interrupt and when to stop, in both descriptions and the instructions', async () => {
    const client = await clientFor('task');
    const { tools } = await client.listTools();
    const instructions = client.getInstructions() ?? '';
    for (const text of [
      tools.find((t) => t.name === 'stop_task_kandev')!.description!,
      tools.find((t) => t.name === 'message_task_kandev')!.description!,
      instructions,
    ]) {
      expect(text).toContain('delivery_mode="interrupt"');
      expect(text).toContain('stop_task_kandev');
      expect(text).toContain('halt-only');
      expect(text).toContain('stop-and-steer');
      // The choosing table of the seed.
      expect(text).toContain('Send information that can wait');
      expect(text).toContain('Stop the current approach and give replacement work now');
      expect(text).toContain('Stop all current work because nothing should replace it');
    }
    for (const text of [tools.find((t) => t.name === 'stop_task_kandev')!.description!, instructions]) {
      expect(text).toMatch(/only works on your direct children/);
      expect(text).toMatch(/logical cancellation, not that the agent process has exited/);
      expect(text).toMatch(/queued messages, its worktree and environment,\s+and its descendant tasks/);
    }
  });
});

describe.each(['config', 'office', 'external'] as const)('%s mode', (mode) => {
  it('registers none of the task tools and leaves the stop/steer guidance out', async () => {
    const client = await clientFor(mode);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(['whoami_kandev']);
    const instructions = client.getInstructions() ?? '';
    expect(instructions).toContain(`${mode} mode`);
    for (const word of ['delivery_mode', 'interrupt', 'stop_task_kandev', 'message_task_kandev', 'halt-only', 'stop-and-steer'])
      expect(instructions).not.toContain(word);
  });

  it('refuses a call to a task tool it does not list, without asking the orchestrator', async () => {
    const client = await clientFor(mode);
    h.handlers.stopChildTask = async (req) => ({ task_id: req.task_id, status: 'stopped' });
    const r = await call(client, 'stop_task_kandev', { task_id: uuid() });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^backend error \[UNKNOWN_ACTION\]: tool stop_task_kandev is not available in .* mode$/);
    expect(r.structuredContent).toMatchObject({ code: 'UNKNOWN_ACTION' });
    expect(h.wire).toEqual([]);
  });

  it('answers whoami with the task of the token', async () => {
    const me = uuid();
    const client = await clientFor(mode, me);
    h.handlers.whoami = async (req) => fakeTask({ id: req.caller_task_id });
    const r = await call(client, 'whoami_kandev', { caller_task_id: uuid() });
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({ id: me });
    expect(h.wire).toEqual([{ subject: OrchMcp.whoami.subject, body: { caller_task_id: me, agent_token: expect.any(String) } }]);
  });
});

describe('stop_task_kandev', () => {
  it('forwards only the child id, with the caller taken from the token; forged arguments are dropped', async () => {
    const parent = uuid();
    const child = uuid();
    const client = await clientFor('task', parent);
    h.handlers.stopChildTask = async (req) => ({ task_id: req.task_id, status: 'stopped' });
    const r = await call(client, 'stop_task_kandev', {
      task_id: child,
      caller_task_id: uuid(),
      sender_task_id: uuid(),
      reason: 'rm -rf /',
      force: true,
    });
    expect(r.isError).toBeFalsy();
    expect(JSON.parse(textOf(r))).toEqual({ task_id: child, status: 'stopped' });
    expect(r.structuredContent).toEqual({ task_id: child, status: 'stopped' });
    expect(h.wire).toEqual([{ subject: OrchMcp.stopChildTask.subject, body: { caller_task_id: parent, agent_token: expect.any(String), task_id: child } }]);
  });

  it("forwards the caller's own token as agent_token, so the orchestrator can verify it (issue 10)", async () => {
    const parent = uuid();
    const token = await agentToken({ task_id: parent, mode: 'task' });
    const client = await connectClient(h.url, token);
    clients.push(client);
    h.handlers.stopChildTask = async (req) => ({ task_id: req.task_id, status: 'stopped' });
    await call(client, 'stop_task_kandev', { task_id: uuid(), agent_token: 'forged' });
    expect((h.wire[0]!.body as { agent_token: string }).agent_token).toBe(token);
  });

  it('returns not_running as it comes', async () => {
    const client = await clientFor('task');
    const child = uuid();
    h.handlers.stopChildTask = async (req) => ({ task_id: req.task_id, status: 'not_running' });
    const r = await call(client, 'stop_task_kandev', { task_id: child });
    expect(r.structuredContent).toEqual({ task_id: child, status: 'not_running' });
  });

  it('reports FORBIDDEN from the orchestrator as an error result', async () => {
    const client = await clientFor('task');
    h.handlers.stopChildTask = async () => {
      throw new KandevError('FORBIDDEN', 'only the direct parent may stop this task');
    };
    const r = await call(client, 'stop_task_kandev', { task_id: uuid() });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toBe('backend error [FORBIDDEN]: only the direct parent may stop this task');
    expect(r.structuredContent).toEqual({ code: 'FORBIDDEN', message: 'only the direct parent may stop this task' });
  });

  it.each([
    ['NOT_FOUND', 'task not found'],
    ['INTERNAL_ERROR', 'could not persist the cancellation'],
  ] as const)('reports %s from the orchestrator as an error result', async (code, message) => {
    const client = await clientFor('task');
    h.handlers.stopChildTask = async () => {
      throw new KandevError(code, message);
    };
    const r = await call(client, 'stop_task_kandev', { task_id: uuid() });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toBe(`backend error [${code}]: ${message}`);
    expect(r.structuredContent).toEqual({ code, message });
  });

  it('answers a missing task_id with VALIDATION_ERROR and asks nobody', async () => {
    const client = await clientFor('task');
    h.handlers.stopChildTask = async (req) => ({ task_id: req.task_id, status: 'stopped' });
    const r = await call(client, 'stop_task_kandev', { sender_task_id: uuid() });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^backend error \[VALIDATION_ERROR\]: invalid arguments for stop_task_kandev: task_id: /);
    expect(r.structuredContent).toMatchObject({ code: 'VALIDATION_ERROR', message: expect.stringContaining('task_id') });
    expect(h.wire).toEqual([]);
  });

  it('answers a task_id that is not a UUID with VALIDATION_ERROR', async () => {
    const client = await clientFor('task');
    const r = await call(client, 'stop_task_kandev', { task_id: 'abc123' });
    expect(r.isError).toBe(true);
    expect(r.structuredContent).toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(h.wire).toEqual([]);
  });
});

describe('message_task_kandev', () => {
  it('passes delivery_mode and session_id on and returns the status', async () => {
    const parent = uuid();
    const child = uuid();
    const session = uuid();
    const client = await clientFor('task', parent);
    h.handlers.messageTask = async (req) => ({
      task_id: req.task_id,
      session_id: req.session_id ?? uuid(),
      status: req.delivery_mode === 'interrupt' ? 'sent' : 'queued',
    });
    const r = await call(client, 'message_task_kandev', {
      task_id: child,
      prompt: 'switch to plan B',
      session_id: session,
      delivery_mode: 'interrupt',
      sender_task_id: uuid(),
    });
    expect(r.isError).toBeFalsy();
    expect(JSON.parse(textOf(r))).toEqual({ task_id: child, session_id: session, status: 'sent' });
    expect(r.structuredContent).toEqual({ task_id: child, session_id: session, status: 'sent' });
    expect(h.wire).toEqual([
      {
        subject: OrchMcp.messageTask.subject,
        body: {
          caller_task_id: parent,
          agent_token: expect.any(String),
          task_id: child,
          prompt: 'switch to plan B',
          session_id: session,
          delivery_mode: 'interrupt',
        },
      },
    ]);
  });

  it('leaves delivery_mode to the orchestrator default when omitted', async () => {
    const parent = uuid();
    const child = uuid();
    const client = await clientFor('task', parent);
    h.handlers.messageTask = async (req) => ({ task_id: req.task_id, session_id: uuid(), status: 'queued' });
    const r = await call(client, 'message_task_kandev', { task_id: child, prompt: 'fyi' });
    expect(r.structuredContent).toMatchObject({ task_id: child, status: 'queued' });
    expect(h.wire).toEqual([
      { subject: OrchMcp.messageTask.subject, body: { caller_task_id: parent, agent_token: expect.any(String), task_id: child, prompt: 'fyi' } },
    ]);
  });

  it('rejects an unknown delivery_mode and a missing prompt with VALIDATION_ERROR', async () => {
    const client = await clientFor('task');
    for (const args of [{ task_id: uuid(), prompt: 'x', delivery_mode: 'now' }, { task_id: uuid() }]) {
      const r = await call(client, 'message_task_kandev', args);
      expect(r.isError).toBe(true);
      expect(r.structuredContent).toMatchObject({ code: 'VALIDATION_ERROR' });
    }
    expect(h.wire).toEqual([]);
  });

  it('keeps the details of a CONFLICT (full queue)', async () => {
    const client = await clientFor('task');
    h.handlers.messageTask = async () => {
      throw new KandevError('CONFLICT', 'message queue is full', { size: 10, limit: 10 });
    };
    const r = await call(client, 'message_task_kandev', { task_id: uuid(), prompt: 'one more' });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toBe('backend error [CONFLICT]: message queue is full');
    expect(r.structuredContent).toEqual({ code: 'CONFLICT', message: 'message queue is full', details: { size: 10, limit: 10 } });
  });
});

describe('create_task_kandev', () => {
  it('creates a child of the caller and returns it', async () => {
    const parent = uuid();
    const client = await clientFor('task', parent);
    let child: ReturnType<typeof fakeTask> & { session_id: string | null } = { ...fakeTask(), session_id: null };
    h.handlers.createTask = async (req) => {
      child = { ...fakeTask({ parent_id: req.caller_task_id, title: req.title, status: 'IN_PROGRESS', agent: req.agent ?? null }), session_id: uuid() };
      return child;
    };
    const r = await call(client, 'create_task_kandev', {
      title: 'write the tests',
      agent: 'scripted-acp',
      prompt: 'go',
      parent_id: uuid(),
      workspace_id: uuid(),
    });
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toEqual(child);
    expect(JSON.parse(textOf(r))).toEqual(child);
    expect(child.parent_id).toBe(parent);
    expect(h.wire).toEqual([
      {
        subject: OrchMcp.createTask.subject,
        body: { caller_task_id: parent, agent_token: expect.any(String), title: 'write the tests', agent: 'scripted-acp', prompt: 'go' },
      },
    ]);
  });

  it('rejects a missing title with VALIDATION_ERROR', async () => {
    const client = await clientFor('task');
    const r = await call(client, 'create_task_kandev', { description: 'no title' });
    expect(r.structuredContent).toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(h.wire).toEqual([]);
  });
});

describe('authentication', () => {
  const initialize = (headers: Record<string, string>) =>
    fetch(h.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
      }),
    });

  it('answers 401 with a JSON-RPC error when there is no token', async () => {
    const res = await initialize({});
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer /);
    const body = await res.json();
    expect(body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: expect.any(Number), message: expect.stringMatching(/Unauthorized/) } });
    await expect(connectClient(h.url, null)).rejects.toThrow(/401|Unauthorized/);
  });

  it.each([
    ['expired', () => signAgentToken(SECRET, { task_id: uuid() }, '-1m')],
    ['operator (wrong audience)', () => signOperatorToken(SECRET, { sub: 'op', workspaces: ['*'] })],
    ['signed with another secret', () => signAgentToken('another-secret-0123456789', { task_id: uuid() })],
    ['garbage', async () => 'not.a.jwt'],
  ])('answers 401 to a token that is %s', async (_what, mint) => {
    const token = await mint();
    const res = await initialize({ authorization: `Bearer ${token}` });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/Unauthorized/);
    await expect(connectClient(h.url, token)).rejects.toThrow(/401|Unauthorized/);
  });

  describe('token table (issue 10): every broken token is refused before any tool runs', () => {
    const me = uuid();
    const table = hostileTokens(SECRET, { aud: 'kandev-mcp', sub: `task:${me}`, task_id: me, mode: 'task' });
    it('covers the cases of the issue', () => {
      expect(table.map((c) => c.name)).toEqual(
        expect.arrayContaining([
          'missing',
          'malformed',
          'expired',
          'without exp',
          'without mode',
          'wrong audience',
          'wrong issuer',
          'wrong secret',
          'alg none',
        ]),
      );
    });
    it.each(table.map((c) => [c.name, c.token] as const))('%s → 401, nothing reaches the orchestrator', async (_name, token) => {
      h.handlers.stopChildTask = async (req) => ({ task_id: req.task_id, status: 'stopped' });
      const res = await fetch(h.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'stop_task_kandev', arguments: { task_id: uuid() } } }),
      });
      expect(res.status).toBe(401);
      const body = (await res.json()) as { error: { message: string }; result?: unknown };
      expect(body.result).toBeUndefined();
      expect(body.error.message).toMatch(/^Unauthorized: /);
      expect(JSON.stringify(body)).not.toContain(me);
      expect(h.wire).toEqual([]);
    });
  });

  it('serves a valid token over plain JSON (no SSE needed)', async () => {
    const res = await initialize({ authorization: `Bearer ${await agentToken({ task_id: uuid() })}` });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/application\/json/);
    expect(res.headers.get('mcp-session-id')).toBeNull();
    expect(await res.json()).toMatchObject({ jsonrpc: '2.0', id: 1, result: { serverInfo: { name: 'kandev' } } });
  });

  it('answers malformed JSON with a JSON-RPC parse error', async () => {
    const res = await fetch(h.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${await agentToken({ task_id: uuid() })}`,
      },
      body: '{"jsonrpc": "2.0", "id": 1, "method":',
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32700 } });
  });

  it('refuses GET on /mcp (stateless: no standalone stream)', async () => {
    const res = await fetch(h.url, { headers: { accept: 'text/event-stream', authorization: `Bearer ${await agentToken({ task_id: uuid() })}` } });
    expect(res.status).toBe(405);
  });
});

describe('without an orchestrator', () => {
  it('reports UNAVAILABLE as an error result', async () => {
    // A harness of its own: the shared one keeps its orchestrator, whatever order the tests run in.
    const alone = await Harness.start();
    try {
      const client = await connectClient(alone.url, await agentToken({ task_id: uuid(), mode: 'task' }));
      clients.push(client);
      await alone.removeOrchestrator();
      const r = await call(client, 'stop_task_kandev', { task_id: uuid() });
      expect(r.isError).toBe(true);
      expect(textOf(r)).toMatch(/^backend error \[UNAVAILABLE\]: /);
      expect(r.structuredContent).toMatchObject({ code: 'UNAVAILABLE' });
    } finally {
      await alone.stop();
    }
  });
});
