import { Buckets, unguardedStrings, type Execution } from '@kandev/contracts';
import { signAgentToken, signOperatorToken } from '@kandev/runtime';
import { poisonedCases, validExample } from '@kandev/testkit';
import { Kvm, type KV } from '@nats-io/kv';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { toolsFor } from '../src/tools/index.js';
import { Harness, uuid } from './harness.js';

/**
 * SPEC R-9.3 / R-9.4 at the agents' edge: the mcp service holds the agent key only; a token is
 * valid only while its execution lives; Origin/Host are checked first; tool inputs refuse NUL and
 * lone surrogates (generated from the tool schemas); bodies must be UTF-8.
 */
const AGENT_KEY = 'mcp-test-agent-key-0123456789abcdef0123';
const OPERATOR_KEY = 'mcp-test-operator-key-0123456789abcdef';

let h: Harness;
let kv: KV;

beforeAll(async () => {
  // The agent key only; cache 0 so a token is refused as soon as its execution is gone.
  h = await Harness.start({ KANDEV_JWT_SECRET: '', KANDEV_AGENT_JWT_SECRET: AGENT_KEY, MCP_EXECUTION_CACHE_MS: '0' });
  // The registry bucket, as lifecycle creates it (it owns it; here the test plays lifecycle).
  kv = await new Kvm(h.nc).create(Buckets.executions, { history: 1 });
});
afterAll(async () => {
  await h?.stop();
});

const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '0' } },
};
const ACCEPT = 'application/json, text/event-stream';

function post(body: Buffer | string, headers: Record<string, string>, url = h.url): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const payload = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
    const req = httpRequest(
      new URL(url),
      { method: 'POST', headers: { accept: ACCEPT, 'content-type': 'application/json', 'content-length': String(payload.length), ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : null });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}
const rpc = (token: string, msg: unknown, headers: Record<string, string> = {}) => post(JSON.stringify(msg), { authorization: `Bearer ${token}`, ...headers });
const toolsList = (token: string) => rpc(token, { jsonrpc: '2.0', id: 2, method: 'tools/list' });

function execution(taskId: string, executionId: string, status: Execution['status']): Execution {
  const now = new Date().toISOString();
  return {
    execution_id: executionId,
    session_id: uuid(),
    task_id: taskId,
    workspace_id: uuid(),
    instance_id: 'lifecycle-1',
    protocol: 'acp',
    agent: 'scripted-acp',
    pid: 1,
    agentctl_pid: 1,
    agentctl_url: 'http://127.0.0.1:1',
    status,
    turn_id: null,
    fence_epoch: 0,
    started_at: now,
    updated_at: now,
  };
}
const register = (e: Execution) => kv.put(`${e.task_id}.${e.execution_id}`, JSON.stringify(e));

describe('keys (ADR 0020)', () => {
  it('accepts an agent token signed with the agent key', async () => {
    expect((await toolsList(await signAgentToken(AGENT_KEY, { task_id: uuid(), mode: 'task' }))).status).toBe(200);
  });
  it('refuses an agent token signed with the operator key (401)', async () => {
    const res = await toolsList(await signAgentToken(OPERATOR_KEY, { task_id: uuid(), mode: 'task' }));
    expect(res.status).toBe(401);
    expect(res.body.error.message).toMatch(/Unauthorized/);
  });
  it('refuses an operator token, whichever key signed it (401)', async () => {
    for (const key of [OPERATOR_KEY, AGENT_KEY]) expect((await toolsList(await signOperatorToken(key, { sub: 'op', workspaces: ['*'] }))).status).toBe(401);
  });
});

describe('agent tokens live as long as their execution (SPEC R-9.3)', () => {
  it('valid while the execution is live, refused once it has ended', async () => {
    const task = uuid();
    const exec = uuid();
    await register(execution(task, exec, 'RUNNING'));
    const token = await signAgentToken(AGENT_KEY, { task_id: task, execution_id: exec, mode: 'task' });
    expect((await toolsList(token)).status).toBe(200);
    // Lifecycle deletes the entry when the execution ends.
    await kv.delete(`${task}.${exec}`);
    const after = await toolsList(token);
    expect(after.status).toBe(401);
    expect(after.body.error.message).toMatch(/execution that has ended/);
  });

  it('refused when the registry says the execution stopped, or has never heard of it', async () => {
    const task = uuid();
    const stopped = uuid();
    await register(execution(task, stopped, 'STOPPED'));
    expect((await toolsList(await signAgentToken(AGENT_KEY, { task_id: task, execution_id: stopped, mode: 'task' }))).status).toBe(401);
    expect((await toolsList(await signAgentToken(AGENT_KEY, { task_id: task, execution_id: uuid(), mode: 'task' }))).status).toBe(401);
  });

  it("never valid for another task: the execution is looked up under the token's task", async () => {
    const task = uuid();
    const exec = uuid();
    await register(execution(task, exec, 'RUNNING'));
    expect((await toolsList(await signAgentToken(AGENT_KEY, { task_id: uuid(), execution_id: exec, mode: 'task' }))).status).toBe(401);
  });

  it('a token naming no execution (npm run token -- agent) is valid until it expires', async () => {
    expect((await toolsList(await signAgentToken(AGENT_KEY, { task_id: uuid(), mode: 'task' }))).status).toBe(200);
  });
});

describe('Origin and Host (DNS rebinding, SPEC R-9.4)', () => {
  let token: string;
  beforeAll(async () => {
    token = await signAgentToken(AGENT_KEY, { task_id: uuid(), mode: 'task' });
  });
  const port = () => new URL(h.url).port;
  it.each([
    ['a foreign Origin', () => ({ origin: 'http://evil.example.com' }), 403],
    ['Origin null', () => ({ origin: 'null' }), 403],
    ['a loopback Origin on another port', () => ({ origin: 'http://localhost:1' }), 403],
    ['a foreign Host (the rebinding case)', () => ({ host: 'evil.example.com' }), 403],
    ['a foreign Host with port', () => ({ host: `evil.example.com:${port()}` }), 403],
    ['the loopback Origin of the MCP port', () => ({ origin: `http://localhost:${port()}` }), 200],
    ['127.0.0.1 Origin of the MCP port', () => ({ origin: `http://127.0.0.1:${port()}` }), 200],
    ['Host localhost', () => ({ host: `localhost:${port()}` }), 200],
    ['no Origin at all (agents)', () => ({}), 200],
  ] as const)('%s → %i', async (_n, headers, status) => {
    expect((await rpc(token, INIT, headers())).status).toBe(status);
  });
  it('refuses before anything else: no token, no body, still 403', async () => {
    const res = await post('not json', { origin: 'http://evil.example.com' });
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ jsonrpc: '2.0', error: { code: -32000, message: 'Forbidden: Origin not allowed' }, id: null });
  });
});

describe('configured Origin and Host lists', () => {
  let h2: Harness;
  beforeAll(async () => {
    h2 = await Harness.start({
      KANDEV_JWT_SECRET: '',
      KANDEV_AGENT_JWT_SECRET: AGENT_KEY,
      MCP_ALLOWED_ORIGINS: 'https://console.example.com, http://agents.internal:8090',
      MCP_ALLOWED_HOSTS: 'mcp,mcp.kandev.svc:8090',
    });
  });
  afterAll(async () => {
    await h2?.stop();
  });
  const at = async (headers: Record<string, string>) => {
    const token = await signAgentToken(AGENT_KEY, { task_id: uuid(), mode: 'task' });
    return (await post(JSON.stringify(INIT), { authorization: `Bearer ${token}`, ...headers }, h2.url)).status;
  };
  it('allows exactly the listed origins and hosts', async () => {
    expect(await at({ host: 'mcp:8090', origin: 'https://console.example.com' })).toBe(200);
    expect(await at({ host: 'mcp.kandev.svc:8090' })).toBe(200);
    expect(await at({ host: 'mcp.kandev.svc:9999' })).toBe(403);
    expect(await at({ host: 'mcp', origin: `http://localhost:${new URL(h2.url).port}` })).toBe(403);
    expect(await at({ host: '127.0.0.1' })).toBe(403);
  });
});

describe('tool inputs: strings refuse NUL and lone surrogates (generated from the tool schemas)', () => {
  const tools = [...toolsFor('task').values()];
  it.each(tools.map((t) => [t.name, t] as const))('%s: its schema guards every string', (_n, t) => {
    expect(unguardedStrings(t.schema as z.ZodType)).toEqual([]);
  });
  const cases = tools.flatMap((t) => poisonedCases(validExample(t.schema as z.ZodType)).map((c) => ({ ...c, tool: t.name })));
  it('has cases for the text tools (this test can fail)', () => {
    expect(cases.map((c) => c.tool)).toEqual(expect.arrayContaining(['create_task_kandev', 'message_task_kandev', 'ask_user_questions']));
  });
  it.each(cases.map((c) => [`${c.tool} ${c.name}`, c] as const))('%s → VALIDATION_ERROR, nothing sent on', async (_n, c) => {
    h.reset();
    const token = await signAgentToken(AGENT_KEY, { task_id: uuid(), mode: 'task' });
    const res = await rpc(token, { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: c.tool, arguments: c.body } });
    expect(res.status).toBe(200);
    expect(res.body.result.isError).toBe(true);
    expect(res.body.result.structuredContent.code).toBe('VALIDATION_ERROR');
    await h.nc.flush();
    expect(h.wire).toEqual([]);
  });
});

describe('body encoding (docs/limits.md)', () => {
  it('refuses a body that is not UTF-8 (400 parse error) instead of reading U+FFFD', async () => {
    const token = await signAgentToken(AGENT_KEY, { task_id: uuid(), mode: 'task' });
    h.reset();
    const args = Buffer.concat([
      Buffer.from('{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"create_task_kandev","arguments":{"title":"a'),
      Buffer.from([0xed, 0xa0, 0x80]),
      Buffer.from('"}}}'),
    ]);
    const res = await post(args, { authorization: `Bearer ${token}` });
    expect(res.status).toBe(400);
    expect(res.body.error).toEqual({ code: -32700, message: 'Parse error: the body is not valid UTF-8' });
    expect(h.wire).toEqual([]);
  });
  it('refuses a charset other than UTF-8 (415)', async () => {
    const token = await signAgentToken(AGENT_KEY, { task_id: uuid(), mode: 'task' });
    expect((await rpc(token, INIT, { 'content-type': 'application/json; charset=iso-8859-1' })).status).toBe(415);
    expect((await rpc(token, INIT, { 'content-type': 'application/json; charset=UTF-8' })).status).toBe(200);
  });
});
