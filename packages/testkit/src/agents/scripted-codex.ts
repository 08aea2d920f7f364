#!/usr/bin/env node
/*
 * A scripted agent speaking the Codex app-server protocol on stdio (JSON lines, JSON-RPC without the
 * "jsonrpc" member): `initialize` + `initialized`, `thread/start`, `turn/start` (answered at once,
 * then streamed as notifications up to `turn/completed`) and `turn/interrupt`. Permission steps are
 * `item/commandExecution/requestApproval` requests to the client. Usage is
 * `thread/tokenUsage/updated` with the report in `tokenUsage.last` and, because Codex has no cost
 * field, the exact report (with `cost_cents`) in `_meta.kandev`, the same place the ACP agent uses.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { createAgentEventSink } from './events.js';
import { JsonLinePeer, RpcFailure } from './jsonl-peer.js';
import { McpToolCaller, mcpTargetFrom, type McpTarget } from './mcp.js';
import { ScriptedTurn, agentLogger, splitPromptBlocks, installSigtermHandling, type TurnIO } from './runner.js';
import type { Usage } from './script.js';

const AGENT = 'scripted-codex';
const log = createAgentEventSink(AGENT);
const logger = agentLogger(AGENT);
const mcpCaller = new McpToolCaller();
const sigterm = installSigtermHandling(log, () => {});

// ---------------------------------------------------------------- wire schemas (the subset this agent serves)

const InitializeParams = z.looseObject({
  clientInfo: z.looseObject({ name: z.string(), version: z.string().optional() }).optional(),
});
// As Codex 0.169 reads a streamable-HTTP server: `http_headers` or `bearer_token_env_var`; `bearer_token` is refused.
const McpServerConfig = z.looseObject({
  url: z.string(),
  http_headers: z.record(z.string(), z.string()).optional(),
  bearer_token_env_var: z.string().optional(),
  bearer_token: z.unknown().optional(),
});

function mcpToken(server: z.infer<typeof McpServerConfig>): string | undefined {
  const header = Object.entries(server.http_headers ?? {}).find(([k]) => k.toLowerCase() === 'authorization')?.[1];
  if (header) return header.replace(/^Bearer\s+/i, '');
  return server.bearer_token_env_var ? process.env[server.bearer_token_env_var] || undefined : undefined;
}
const ThreadStartParams = z.looseObject({
  cwd: z.string().nullish(),
  config: z.looseObject({ mcp_servers: z.record(z.string(), McpServerConfig).optional() }).nullish(),
});
const UserInput = z.union([z.object({ type: z.literal('text'), text: z.string() }), z.looseObject({ type: z.string() })]);
const TurnStartParams = z.looseObject({ threadId: z.string(), input: z.array(UserInput) });
const TurnInterruptParams = z.object({ threadId: z.string(), turnId: z.string() });
const ApprovalResponse = z.object({ decision: z.enum(['accept', 'acceptForSession', 'decline', 'cancel']) });

function parseParams<T extends z.ZodType>(schema: T, params: unknown): z.infer<T> {
  const parsed = schema.safeParse(params ?? {});
  if (!parsed.success) throw new RpcFailure(-32602, `invalid params: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}

// ---------------------------------------------------------------- state

interface Thread {
  id: string;
  mcp: McpTarget | undefined;
  turn: { id: string; scripted: ScriptedTurn } | undefined;
  totals: Usage;
}
const threads = new Map<string, Thread>();
let initialized = false;

const peer = new JsonLinePeer(process.stdin, process.stdout, (message) => {
  if (message.kind === 'request' || message.kind === 'notification') {
    log('recv', { method: message.method, ...(message.kind === 'request' ? { id: message.id } : {}) });
  } else {
    log('recv', { response_to: message.id });
  }
});

const breakdown = (u: Usage) => ({
  totalTokens: u.tokens_in + u.tokens_out,
  inputTokens: u.tokens_in,
  cachedInputTokens: u.tokens_cached_in,
  outputTokens: u.tokens_out,
  reasoningOutputTokens: 0,
});

function turnIO(thread: Thread, turnId: string): TurnIO {
  const threadId = thread.id;
  return {
    say: async (text) => {
      const id = `msg_${randomUUID()}`;
      peer.notify('item/started', { threadId, turnId, item: { type: 'agentMessage', id, text: '' } });
      peer.notify('item/agentMessage/delta', { threadId, turnId, itemId: id, delta: text });
      peer.notify('item/completed', { threadId, turnId, item: { type: 'agentMessage', id, text } });
    },
    usage: async (u) => {
      const t = thread.totals;
      t.cost_cents += u.cost_cents;
      t.tokens_in += u.tokens_in;
      t.tokens_cached_in += u.tokens_cached_in;
      t.tokens_out += u.tokens_out;
      peer.notify('thread/tokenUsage/updated', {
        threadId,
        turnId,
        tokenUsage: { total: breakdown(t), last: breakdown(u), modelContextWindow: null },
        _meta: { kandev: { ...u } },
      });
    },
    toolCallStarted: async (id, title) => {
      const item = title.startsWith('mcp:')
        ? { type: 'mcpToolCall', id, server: 'kandev', tool: title.slice(4).trim(), status: 'inProgress' }
        : { type: 'commandExecution', id, command: title, status: 'inProgress' };
      peer.notify('item/started', { threadId, turnId, item });
    },
    toolCallFinished: async (id, status) => {
      peer.notify('item/completed', { threadId, turnId, item: { id, status } });
    },
    permission: async (itemId, text) => {
      const raw = await peer.request('item/commandExecution/requestApproval', { threadId, turnId, itemId, command: text, reason: text });
      const parsed = ApprovalResponse.safeParse(raw);
      return parsed.success ? parsed.data.decision : 'invalid';
    },
  };
}

async function runTurn(thread: Thread, turnId: string, scripted: ScriptedTurn): Promise<void> {
  const threadId = thread.id;
  peer.notify('turn/started', { threadId, turn: { id: turnId, status: 'inProgress', items: [], error: null } });
  const result = await scripted.run();
  thread.turn = undefined;
  const status = result.status === 'completed' ? 'completed' : result.status === 'cancelled' ? 'interrupted' : 'failed';
  const error = result.status === 'failed' ? { message: result.message } : null;
  peer.notify('turn/completed', { threadId, turn: { id: turnId, status, items: [], error } });
}

peer.onNotification((method) => {
  if (method === 'initialized') initialized = true;
});

peer.onRequest(async (method, params) => {
  if (method === 'initialize') {
    const p = parseParams(InitializeParams, params);
    logger('info', 'initialize', { client: p.clientInfo?.name });
    return { userAgent: `${AGENT}/0.1.0` };
  }
  if (!initialized) throw new RpcFailure(-32002, 'not initialized');
  switch (method) {
    case 'thread/start': {
      const p = parseParams(ThreadStartParams, params);
      const servers = p.config?.mcp_servers ?? {};
      const kandev = servers.kandev ?? Object.values(servers)[0];
      for (const [name, server] of Object.entries(servers)) {
        if (server.bearer_token !== undefined)
          throw new RpcFailure(-32600, `failed to load configuration: bearer_token is not supported for streamable_http\nin \`mcp_servers.${name}\`\n`);
      }
      const fromConfig = kandev ? { url: kandev.url, token: mcpToken(kandev) } : undefined;
      const thread: Thread = {
        id: `thr_${randomUUID()}`,
        mcp: mcpTargetFrom(fromConfig),
        turn: undefined,
        totals: { cost_cents: 0, tokens_in: 0, tokens_cached_in: 0, tokens_out: 0 },
      };
      threads.set(thread.id, thread);
      log('start', {
        thread_id: thread.id,
        cwd: p.cwd ?? null,
        mcp_servers: Object.keys(servers),
        mcp_url: thread.mcp?.url ?? null,
        mcp_token: thread.mcp?.token !== undefined,
      });
      setImmediate(() => peer.notify('thread/started', { thread: { id: thread.id } }));
      return { thread: { id: thread.id } };
    }
    case 'turn/start': {
      const p = parseParams(TurnStartParams, params);
      const thread = threads.get(p.threadId);
      if (!thread) throw new RpcFailure(-32602, `unknown thread ${p.threadId}`);
      if (thread.turn) throw new RpcFailure(-32600, `turn ${thread.turn.id} is still in progress`);
      const { text, context } = splitPromptBlocks(p.input.flatMap((i) => ('text' in i && typeof i.text === 'string' ? [i.text] : [])));
      const turnId = `turn_${randomUUID()}`;
      const scripted = new ScriptedTurn(
        text,
        { context, io: turnIO(thread, turnId), log, mcp: thread.mcp, mcpCaller, ignoreSigterm: () => sigterm.ignore() },
        turnId,
      );
      thread.turn = { id: turnId, scripted };
      // The response goes out first (a microtask), the turn's notifications after it.
      setImmediate(() => void runTurn(thread, turnId, scripted));
      return { turn: { id: turnId, status: 'inProgress', items: [], error: null } };
    }
    case 'turn/interrupt': {
      const p = parseParams(TurnInterruptParams, params);
      const turn = threads.get(p.threadId)?.turn;
      log('cancel', { thread_id: p.threadId, turn_id: p.turnId, active: turn?.id ?? null });
      if (!turn || turn.id !== p.turnId) throw new RpcFailure(-32600, `no turn ${p.turnId} in progress`);
      turn.scripted.cancel();
      return {};
    }
    default:
      throw new RpcFailure(-32601, `method not found: ${method}`);
  }
});

logger('info', 'scripted Codex agent listening on stdio');
void peer.closed.then(async () => {
  log('exit', { reason: 'stdin closed' });
  await mcpCaller.close();
  process.exit(0);
});
