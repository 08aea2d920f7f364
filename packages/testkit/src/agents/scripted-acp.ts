#!/usr/bin/env node
/*
 * A scripted ACP agent on stdio, built on the official ACP SDK. It answers `initialize`,
 * `session/new` (recording the MCP servers it is given), `session/prompt` (running the prompt's
 * script) and the `session/cancel` notification. Logs go to stderr; stdout carries only ACP.
 *
 * Usage is reported as a stable `session/update` of kind `usage_update`: `cost` carries the
 * cumulative session cost in USD as ACP defines it, and `_meta.kandev` carries the exact numbers of
 * this one report (`cost_cents`, `tokens_in`, `tokens_cached_in`, `tokens_out`) as a delta.
 */
import { randomUUID } from 'node:crypto';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { createAgentEventSink } from './events.js';
import { McpToolCaller, mcpTargetFrom, type McpTarget } from './mcp.js';
import { ScriptedTurn, agentLogger, splitPromptBlocks, installSigtermHandling, type TurnIO } from './runner.js';

const AGENT = 'scripted-acp';
const log = createAgentEventSink(AGENT);
const logger = agentLogger(AGENT);
const mcpCaller = new McpToolCaller();

interface Session {
  id: string;
  cwd: string;
  mcp: McpTarget | undefined;
  turn: ScriptedTurn | undefined;
  /** Cumulative totals, because ACP's `usage_update.cost` is the session total. */
  totals: { costCents: number; tokens: number };
}
const sessions = new Map<string, Session>();

const sigterm = installSigtermHandling(log, () => {});

/** The first HTTP MCP server named `kandev` (or else the first HTTP one), with its bearer token. */
function mcpTargetOf(servers: acp.McpServer[]): McpTarget | undefined {
  const http = servers.flatMap((s) => ('type' in s && s.type === 'http' ? [s] : []));
  const chosen = http.find((s) => s.name === 'kandev') ?? http[0];
  if (!chosen) return undefined;
  const auth = chosen.headers.find((h) => h.name.toLowerCase() === 'authorization')?.value;
  const token = auth?.replace(/^Bearer\s+/i, '');
  return { url: chosen.url, token: token || undefined };
}

function turnIO(client: acp.AgentContext, session: Session): TurnIO {
  const update = (u: acp.SessionUpdate) => client.notify(acp.methods.client.session.update, { sessionId: session.id, update: u });
  return {
    say: (text) => update({ sessionUpdate: 'agent_message_chunk', content: { type: 'text', text } }),
    usage: (u) => {
      session.totals.costCents += u.cost_cents;
      session.totals.tokens += u.tokens_in + u.tokens_out;
      return update({
        sessionUpdate: 'usage_update',
        used: session.totals.tokens,
        size: 200_000,
        cost: { amount: session.totals.costCents / 100, currency: 'USD' },
        _meta: { kandev: { ...u } },
      });
    },
    toolCallStarted: (toolCallId, title) =>
      update({ sessionUpdate: 'tool_call', toolCallId, title, kind: title.startsWith('mcp:') ? 'other' : 'execute', status: 'in_progress' }),
    toolCallFinished: (toolCallId, status) => update({ sessionUpdate: 'tool_call_update', toolCallId, status }),
    permission: async (toolCallId, text) => {
      const response = await client.request(acp.methods.client.session.requestPermission, {
        sessionId: session.id,
        toolCall: { toolCallId, title: text, kind: 'execute', status: 'pending' },
        options: [
          { optionId: 'allow', name: 'Allow', kind: 'allow_once' },
          { optionId: 'reject', name: 'Reject', kind: 'reject_once' },
        ],
      });
      return response.outcome.outcome === 'cancelled' ? 'cancelled' : response.outcome.optionId;
    },
  };
}

const input = Readable.toWeb(process.stdin) as ReadableStream<Uint8Array>;
const output = Writable.toWeb(process.stdout) as WritableStream<Uint8Array>;
const wire = acp.ndJsonStream(output, input);
// Tap every inbound message into the events file before the SDK dispatches it.
const tapped = wire.readable.pipeThrough(
  new TransformStream<acp.AnyMessage, acp.AnyMessage>({
    transform(message, controller) {
      const method = 'method' in message ? message.method : undefined;
      const id = 'id' in message ? message.id : undefined;
      log('recv', method ? { method, ...(id !== undefined ? { id } : {}) } : { response_to: id });
      controller.enqueue(message);
    },
  }),
);

const app = acp
  .agent({ name: AGENT })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false, mcpCapabilities: { http: true, sse: false }, promptCapabilities: {} },
    agentInfo: { name: AGENT, version: '0.1.0' },
    authMethods: [],
  }))
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    const session: Session = {
      id: `sess_${randomUUID()}`,
      cwd: params.cwd,
      mcp: mcpTargetFrom(mcpTargetOf(params.mcpServers)),
      turn: undefined,
      totals: { costCents: 0, tokens: 0 },
    };
    sessions.set(session.id, session);
    // The token itself never reaches the log: only whether one was given.
    const servers = params.mcpServers.map((s) => ({
      name: s.name,
      type: 'type' in s ? s.type : 'stdio',
      url: 'url' in s ? s.url : undefined,
      headers: 'headers' in s ? s.headers.map((h) => h.name) : [],
    }));
    log('start', { session_id: session.id, cwd: params.cwd, mcp_servers: servers, mcp_token: session.mcp?.token !== undefined });
    logger('info', 'session created', { session_id: session.id, mcp_servers: servers });
    return { sessionId: session.id };
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const session = sessions.get(params.sessionId);
    if (!session) throw acp.RequestError.invalidParams({ sessionId: params.sessionId }, 'unknown session');
    if (session.turn) throw acp.RequestError.invalidRequest({ sessionId: session.id }, 'a prompt turn is already in flight');
    const { text, context } = splitPromptBlocks(params.prompt.flatMap((block) => (block.type === 'text' ? [block.text] : [])));
    const turn = new ScriptedTurn(text, { context, io: turnIO(client, session), log, mcp: session.mcp, mcpCaller, ignoreSigterm: () => sigterm.ignore() });
    session.turn = turn;
    try {
      const result = await turn.run();
      if (result.status === 'failed') throw acp.RequestError.internalError({ reason: result.message }, result.message);
      return { stopReason: result.status === 'cancelled' ? 'cancelled' : 'end_turn' };
    } finally {
      session.turn = undefined;
    }
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    const turn = sessions.get(params.sessionId)?.turn;
    log('cancel', { session_id: params.sessionId, turn: turn?.id ?? null });
    turn?.cancel();
  });

const connection = app.connect({ readable: tapped, writable: wire.writable });
logger('info', 'scripted ACP agent listening on stdio');
void connection.closed.then(async () => {
  // The client went away (stdin closed): an agent never outlives its controller.
  log('exit', { reason: 'connection closed' });
  await mcpCaller.close();
  process.exit(0);
});
