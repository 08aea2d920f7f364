import { randomUUID } from 'node:crypto';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { costOf } from '@kandev/contracts/pricing';
import type { AgentctlStopReason } from '@kandev/contracts/agentctl';
import { z } from 'zod';
import { AgentProcess, type Termination } from '../agent-process.js';
import { AGENTCTL_VERSION } from '../version.js';
import { unlessAgentExits, withinDeadline, type AgentAdapter } from './adapter.js';
import { type PermissionAnswers, type PermissionChoice } from './permissions.js';
import { ProcessAdapter } from './process-adapter.js';

/**
 * Exact per-report usage in `usage_update._meta.kandev` (what the scripted agent sends). Agents that
 * only report ACP's cumulative `cost` get a delta of it instead, with no token counts.
 */
const KandevUsageMeta = z.object({
  kandev: z.object({
    cost_cents: z.number().nonnegative(),
    tokens_in: z.number().int().nonnegative(),
    tokens_cached_in: z.number().int().nonnegative(),
    tokens_out: z.number().int().nonnegative(),
  }),
});

/**
 * Gemini CLI's per-prompt token report on the `session/prompt` answer (`_meta.quota`): totals per
 * model for the whole prompt. Tokens only; the cost comes from pricing.ts or is marked unpriced.
 */
const PromptQuotaMeta = z.looseObject({
  quota: z.looseObject({
    model_usage: z
      .array(
        z.looseObject({
          model: z.string().min(1),
          token_count: z.looseObject({ input_tokens: z.number().int().nonnegative(), output_tokens: z.number().int().nonnegative() }),
        }),
      )
      .default([]),
  }),
});

/** A tool call's content as text for the transcript: its text blocks, else its raw input/output as JSON. */
function toolText(content: unknown, raw: unknown): string {
  const texts: string[] = [];
  if (Array.isArray(content)) {
    for (const c of content as Array<{ type?: string; content?: { type?: string; text?: unknown }; path?: unknown; newText?: unknown }>) {
      if (c?.type === 'content' && c.content?.type === 'text' && typeof c.content.text === 'string') texts.push(c.content.text);
      else if (c?.type === 'diff' && typeof c.path === 'string') texts.push(`diff ${c.path}`);
    }
  }
  if (texts.length) return texts.join('\n');
  if (raw === undefined || raw === null) return '';
  return typeof raw === 'string' ? raw : JSON.stringify(raw);
}

type ToolCallState = 'pending' | 'in_progress' | 'completed' | 'failed' | 'cancelled';

export class AcpAdapter extends ProcessAdapter<acp.RequestPermissionResponse> implements AgentAdapter {
  readonly protocol = 'acp' as const;
  private connection: acp.ClientConnection | undefined;
  private sessionId: string | undefined;
  private turnId: string | undefined;
  /** Usage that arrives between turns is charged to the turn that just ended. */
  private lastTurnId: string | undefined;
  private readonly toolCalls = new Map<string, ToolCallState>();
  /** Title and kind of each tool call since its start, for its end's report. */
  private readonly toolNames = new Map<string, { title: string | null; kind: string | null }>();
  private cumulativeCostUsd = 0;

  private get session(): { connection: acp.ClientConnection; sessionId: string } {
    if (!this.connection || !this.sessionId) throw new Error('ACP session not established');
    return { connection: this.connection, sessionId: this.sessionId };
  }

  async start(): Promise<void> {
    const agent = await AgentProcess.start(this.spec, this.options, this.log);
    this.process = agent;
    const stream = acp.ndJsonStream(
      Writable.toWeb(agent.child.stdin) as WritableStream<Uint8Array>,
      Readable.toWeb(agent.child.stdout) as ReadableStream<Uint8Array>,
    );
    const client = acp
      .client({ name: 'kandev-agentctl' })
      .onRequest(acp.methods.client.session.requestPermission, ({ params }) => this.onPermissionRequest(params))
      .onNotification(acp.methods.client.session.update, ({ params }) => this.onSessionUpdate(params));
    const connection = client.connect(stream);
    this.connection = connection;

    const deadline = <T>(work: Promise<T>, step: string) =>
      withinDeadline(work, this.options.handshakeTimeoutMs, `agent did not answer ${step} within ${this.options.handshakeTimeoutMs} ms`, agent.exited);
    const init = await deadline(
      connection.agent.request(acp.methods.agent.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        // agentctl runs headless: it offers no file system or terminal to the agent.
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
        clientInfo: { name: 'kandev-agentctl', version: AGENTCTL_VERSION },
      }),
      'initialize',
    );
    const mcpServers: acp.McpServer[] = [];
    if (this.options.mcp) {
      if (init.agentCapabilities?.mcpCapabilities?.http !== true) {
        this.log.warn({ agent: this.spec.name }, 'agent does not advertise HTTP MCP support; offering the kandev server anyway');
      }
      const headers = this.options.mcp.token ? [{ name: 'Authorization', value: `Bearer ${this.options.mcp.token}` }] : [];
      mcpServers.push({ type: 'http', name: 'kandev', url: this.options.mcp.url, headers });
    }
    const session = await deadline(connection.agent.request(acp.methods.agent.session.new, { cwd: this.options.cwd, mcpServers }), 'session/new');
    this.sessionId = session.sessionId;
    this.log.info({ session_id: session.sessionId, protocol_version: init.protocolVersion, mcp: mcpServers.length > 0 }, 'ACP session ready');
  }

  async prompt(turnId: string, text: string, context?: string): Promise<AgentctlStopReason> {
    const { connection, sessionId } = this.session;
    this.turnId = turnId;
    this.lastTurnId = turnId;
    this.toolCalls.clear();
    this.toolNames.clear();
    try {
      const response = await unlessAgentExits(
        connection.agent.request(acp.methods.agent.session.prompt, {
          sessionId,
          prompt: [...(context ? [{ type: 'text' as const, text: context }] : []), { type: 'text', text }],
        }),
        this.agent.exited,
      );
      this.reportPromptUsage(turnId, response._meta);
      return response.stopReason;
    } finally {
      this.turnId = undefined;
      // Nothing may keep waiting on a turn that is over.
      this.permissions.cancelAll();
    }
  }

  async cancel(): Promise<void> {
    const { connection, sessionId } = this.session;
    // ACP asks the client to treat unfinished tool calls of the turn as cancelled from here on.
    let marked = 0;
    for (const [id, state] of this.toolCalls) {
      if (state === 'pending' || state === 'in_progress') {
        this.toolCalls.set(id, 'cancelled');
        marked++;
      }
    }
    await connection.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    const released = this.permissions.cancelAll();
    this.log.info({ session_id: sessionId, turn_id: this.turnId, tool_calls_cancelled: marked, permissions_cancelled: released }, 'sent session/cancel');
  }

  async stop(graceMs: number): Promise<Termination> {
    const result = await this.agent.terminate(graceMs);
    this.connection?.close();
    return result;
  }

  private onPermissionRequest(params: acp.RequestPermissionRequest): Promise<acp.RequestPermissionResponse> {
    const cancelled: acp.RequestPermissionResponse = { outcome: { outcome: 'cancelled' } };
    if (this.turnId === undefined || params.sessionId !== this.sessionId) return Promise.resolve(cancelled);
    // Once before always, so an operator's plain "allow" or "deny" grants or refuses no more than this call.
    const rank: Record<acp.PermissionOptionKind, number> = { allow_once: 0, allow_always: 1, reject_once: 2, reject_always: 3 };
    const choices: PermissionChoice<acp.RequestPermissionResponse>[] = [...params.options]
      .sort((a, b) => rank[a.kind] - rank[b.kind])
      .map((o) => ({
        optionId: o.optionId,
        answer: { outcome: { outcome: 'selected' as const, optionId: o.optionId } },
        outcome: o.kind === 'allow_once' || o.kind === 'allow_always' ? ('allowed' as const) : ('denied' as const),
      }));
    const answers: PermissionAnswers<acp.RequestPermissionResponse> = { choices, cancel: cancelled };
    return this.permissions.open(
      {
        turn_id: this.turnId,
        permission_id: randomUUID(),
        title: params.toolCall.title ?? params.toolCall.toolCallId,
        options: params.options.map((o) => ({ id: o.optionId, name: o.name, kind: o.kind })),
      },
      answers,
    );
  }

  private onSessionUpdate(params: acp.SessionNotification): void {
    if (params.sessionId !== this.sessionId) return;
    const update = params.update;
    switch (update.sessionUpdate) {
      case 'agent_message_chunk':
        if (update.content.type === 'text' && this.turnId) this.sink.agentMessage(this.turnId, update.content.text);
        break;
      case 'tool_call':
        this.toolCalls.set(update.toolCallId, update.status ?? 'pending');
        this.toolNames.set(update.toolCallId, { title: update.title ?? null, kind: update.kind ?? null });
        if (this.turnId)
          this.sink.toolCall(this.turnId, {
            tool_call_id: update.toolCallId,
            phase: 'started',
            title: update.title ?? null,
            kind: update.kind ?? null,
            text: toolText(update.content, update.rawInput),
          });
        break;
      case 'tool_call_update':
        if (update.status === 'completed' || update.status === 'failed') {
          this.toolCalls.delete(update.toolCallId);
          // An update carries only what changed: the title and kind are the start's unless it renames them.
          const named = this.toolNames.get(update.toolCallId);
          this.toolNames.delete(update.toolCallId);
          if (this.turnId)
            this.sink.toolCall(this.turnId, {
              tool_call_id: update.toolCallId,
              phase: update.status,
              title: update.title ?? named?.title ?? null,
              kind: update.kind ?? named?.kind ?? null,
              text: toolText(update.content, update.rawOutput),
            });
        } else if (update.status && this.toolCalls.get(update.toolCallId) !== 'cancelled') this.toolCalls.set(update.toolCallId, update.status);
        break;
      case 'usage_update':
        this.onUsage(update);
        break;
      default:
        break;
    }
  }

  private reportPromptUsage(turnId: string, meta: unknown): void {
    const parsed = PromptQuotaMeta.safeParse(meta ?? {});
    if (!parsed.success) return;
    for (const { model, token_count } of parsed.data.quota.model_usage) {
      if (token_count.input_tokens === 0 && token_count.output_tokens === 0) continue;
      const tokens = { tokens_in: token_count.input_tokens, tokens_cached_in: 0, tokens_out: token_count.output_tokens };
      this.sink.usage(turnId, { ...costOf(model, tokens), ...tokens, model });
    }
  }

  private onUsage(update: acp.UsageUpdate): void {
    const turnId = this.turnId ?? this.lastTurnId;
    const previousCost = this.cumulativeCostUsd;
    if (update.cost && update.cost.currency === 'USD') this.cumulativeCostUsd = update.cost.amount;
    if (!turnId) {
      this.log.warn('usage reported before any turn; dropped');
      return;
    }
    const exact = KandevUsageMeta.safeParse(update._meta ?? {});
    if (exact.success) {
      this.sink.usage(turnId, exact.data.kandev);
      return;
    }
    const deltaCents = Math.round((this.cumulativeCostUsd - previousCost) * 100 * 1e6) / 1e6;
    if (deltaCents > 0) this.sink.usage(turnId, { cost_cents: deltaCents, tokens_in: 0, tokens_cached_in: 0, tokens_out: 0 });
  }
}
