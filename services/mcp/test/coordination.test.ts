import { conflict, forbidden } from '@kandev/contracts';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { agentToken, connectClient, Harness, uuid } from './harness.js';

type ToolResult = { isError?: boolean; content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, unknown> };
const call = async (client: Client, name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: args })) as ToolResult;
const textOf = (r: ToolResult) => r.content.find((c) => c.type === 'text')?.text ?? '';
const COORD = ['list_tasks_kandev', 'get_task_conversation_kandev', 'spawn_session_kandev'];

let h: Harness;
const clients: Client[] = [];
async function clientFor(mode: 'task' | 'config' | 'office' | 'external', taskId = uuid()) {
  const client = await connectClient(h.url, await agentToken({ task_id: taskId, mode }));
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
afterAll(async () => h?.stop());

/** at the MCP surface: the three tools, what they send, what they answer, and what they tell the agent. */
describe('coordination tools (task mode)', () => {
  it('lists the three tools with their inputs and annotations', async () => {
    const { tools } = await (await clientFor('task')).listTools();
    const byName = new Map(tools.map((t) => [t.name, t]));
    expect(Object.keys(byName.get('list_tasks_kandev')!.inputSchema.properties ?? {})).toEqual([]);
    expect(byName.get('list_tasks_kandev')!.annotations).toMatchObject({ readOnlyHint: true, destructiveHint: false });
    const conv = byName.get('get_task_conversation_kandev')!;
    expect(Object.keys(conv.inputSchema.properties ?? {}).sort()).toEqual(['after_seq', 'limit', 'task_id']);
    expect(conv.inputSchema.required).toEqual(['task_id']);
    expect(conv.annotations).toMatchObject({ readOnlyHint: true });
    const spawn = byName.get('spawn_session_kandev')!;
    expect(Object.keys(spawn.inputSchema.properties ?? {}).sort()).toEqual(['agent', 'prompt', 'task_id']);
    expect(spawn.inputSchema.required).toEqual(['task_id']);
    expect(spawn.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: false });
  });

  it('says when to use each, within bounds, and stop and message name spawn_session_kandev for a restart', async () => {
    const client = await clientFor('task');
    const { tools } = await client.listTools();
    const desc = (n: string) => tools.find((t) => t.name === n)!.description!;
    expect(desc('list_tasks_kandev')).toMatch(/Use it to watch your delegated work/);
    expect(desc('get_task_conversation_kandev')).toMatch(/before deciding to steer it/);
    expect(desc('get_task_conversation_kandev')).toMatch(/next_seq as after_seq/);
    expect(desc('spawn_session_kandev')).toMatch(/restart a child you stopped with stop_task_kandev/);
    expect(desc('spawn_session_kandev')).toMatch(/CONFLICT/);
    expect(desc('spawn_session_kandev')).toMatch(/FORBIDDEN/);
    for (const n of COORD) expect(desc(n).length, n).toBeLessThanOrEqual(1_000);
    // The restart pointer of the seed ("use spawn_session_kandev to restart").
    expect(desc('stop_task_kandev')).toMatch(/CANCELLED sessions cannot be resumed, use spawn_session_kandev to restart/);
    expect(desc('message_task_kandev')).toContain('spawn_session_kandev');
    const instructions = client.getInstructions() ?? '';
    for (const n of COORD) expect(instructions).toContain(n);
    expect(instructions).toMatch(/delegation loop/);
    // stop and message descriptions keep their bounds too (R-1.9: the choosing table fits).
    for (const n of ['stop_task_kandev', 'message_task_kandev']) expect(desc(n).length, n).toBeLessThanOrEqual(3_000);
  });

  it('forwards the caller and its token, never caller-chosen identities, and answers the orchestrator result as JSON', async () => {
    const me = uuid();
    const child = uuid();
    const session = uuid();
    const client = await clientFor('task', me);
    h.handlers.listChildren = async () => ({
      tasks: [
        { id: child, title: 'c', status: 'IN_PROGRESS', session: { id: session, state: 'RUNNING' }, hold: null, pending_questions: 1, pending_permissions: 0 },
      ],
    });
    h.handlers.childConversation = async (req) => ({
      task_id: req.task_id,
      session_id: session,
      items: [{ seq: 3, role: 'agent', kind: 'agent_text', text: 'hi', created_at: '2026-01-01T00:00:00Z' }],
      next_seq: null,
    });
    h.handlers.spawnSession = async (req) => ({ task_id: req.task_id, session_id: session, status: 'started' });

    const listed = await call(client, 'list_tasks_kandev', { caller_task_id: uuid() });
    expect(listed.isError).toBeFalsy();
    expect(JSON.parse(textOf(listed))).toEqual({
      tasks: [expect.objectContaining({ id: child, session: { id: session, state: 'RUNNING' }, pending_questions: 1 })],
    });
    const conv = await call(client, 'get_task_conversation_kandev', { task_id: child, after_seq: 2, limit: 10 });
    expect(conv.structuredContent).toMatchObject({ task_id: child, session_id: session, next_seq: null });
    const spawned = await call(client, 'spawn_session_kandev', { task_id: child, prompt: 'again', sender_task_id: uuid() });
    expect(spawned.structuredContent).toEqual({ task_id: child, session_id: session, status: 'started' });

    expect(h.wire.map((w) => w.subject)).toEqual(['kandev.orch.mcp.list_children', 'kandev.orch.mcp.child_conversation', 'kandev.orch.mcp.spawn_session']);
    for (const w of h.wire) {
      expect(w.body.caller_task_id).toBe(me);
      expect(typeof w.body.agent_token).toBe('string');
    }
    expect(h.wire[1]!.body).toMatchObject({ task_id: child, after_seq: 2, limit: 10 });
    expect(h.wire[2]!.body).toMatchObject({ task_id: child, prompt: 'again' });
    expect(h.wire[2]!.body).not.toHaveProperty('sender_task_id');
  });

  it('answers refusals in the pinned failure shape', async () => {
    const client = await clientFor('task');
    h.handlers.childConversation = async () => {
      throw forbidden('only the direct parent task may control this task');
    };
    h.handlers.spawnSession = async () => {
      throw conflict('task already has a live session', { session_id: uuid() });
    };
    const conv = await call(client, 'get_task_conversation_kandev', { task_id: uuid() });
    expect(conv.isError).toBe(true);
    expect(textOf(conv)).toMatch(/^backend error \[FORBIDDEN\]: /);
    const spawn = await call(client, 'spawn_session_kandev', { task_id: uuid() });
    expect(textOf(spawn)).toMatch(/^backend error \[CONFLICT\]: task already has a live session/);
    expect(spawn.structuredContent).toMatchObject({ code: 'CONFLICT' });
    // Arguments are checked before the orchestrator is asked.
    const bad = await call(client, 'get_task_conversation_kandev', { task_id: 'not-a-uuid', after_seq: -1 });
    expect(textOf(bad)).toMatch(/^backend error \[VALIDATION_ERROR\]/);
    expect(h.wire.map((w) => w.subject)).toEqual(['kandev.orch.mcp.child_conversation', 'kandev.orch.mcp.spawn_session']);
  });
});

describe.each(['config', 'office', 'external'] as const)('%s mode', (mode) => {
  it('registers none of the coordination tools, mentions none, and refuses a call without asking the orchestrator', async () => {
    const client = await clientFor(mode);
    const { tools } = await client.listTools();
    for (const n of COORD) expect(tools.map((t) => t.name)).not.toContain(n);
    for (const n of COORD) expect(client.getInstructions() ?? '').not.toContain(n);
    const r = await call(client, 'spawn_session_kandev', { task_id: uuid() });
    expect(textOf(r)).toMatch(/^backend error \[UNKNOWN_ACTION\]/);
    expect(h.wire).toEqual([]);
  });
});
