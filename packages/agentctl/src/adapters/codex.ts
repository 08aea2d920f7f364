import { randomUUID } from 'node:crypto';
import { costOf } from '@kandev/contracts/pricing';
import type { AgentctlStopReason } from '@kandev/contracts/agentctl';
import { z } from 'zod';
import { AgentProcess, type Termination } from '../agent-process.js';
import { errorMessage } from '../log.js';
import { AGENTCTL_VERSION } from '../version.js';
import { unlessAgentExits, withinDeadline, type AgentAdapter } from './adapter.js';
import { JsonLineRpc, RpcError } from './jsonl-rpc.js';
import { ProcessAdapter } from './process-adapter.js';

// ---------------------------------------------------------------- the Codex app-server messages agentctl reads

const ThreadStartResult = z.looseObject({ thread: z.looseObject({ id: z.string().min(1) }), model: z.string().min(1).optional() });
const TurnStatus = z.enum(['completed', 'interrupted', 'failed', 'inProgress']);
const TurnStartResult = z.looseObject({ turn: z.looseObject({ id: z.string().min(1), status: TurnStatus.optional() }) });
const TurnCompleted = z.looseObject({
  threadId: z.string(),
  turn: z.looseObject({
    id: z.string(),
    status: TurnStatus,
    error: z.looseObject({ message: z.string() }).nullish(),
  }),
});
const AgentMessageDelta = z.looseObject({ threadId: z.string().optional(), turnId: z.string().optional(), delta: z.string() });
/**
 * `item/started` / `item/completed` of the app-server: the items that are tool calls (a command, a
 * file change, an MCP tool call) become transcript tool calls; agent messages and reasoning do not
 * (their text arrives as deltas).
 */
const ItemNotification = z.looseObject({
  item: z.looseObject({
    id: z.string().min(1),
    type: z.string().optional(),
    status: z.string().optional(),
    command: z.union([z.string(), z.array(z.string())]).optional(),
    aggregatedOutput: z.string().nullable().optional(),
    server: z.string().optional(),
    tool: z.string().optional(),
    arguments: z.unknown().optional(),
    result: z.unknown().optional(),
    changes: z.array(z.looseObject({ path: z.string() })).optional(),
  }),
});
const TOOL_ITEM_TYPES = new Set(['commandExecution', 'fileChange', 'mcpToolCall']);
const TokenBreakdown = z.looseObject({
  inputTokens: z.number().int().nonnegative(),
  cachedInputTokens: z.number().int().nonnegative().default(0),
  outputTokens: z.number().int().nonnegative(),
});
const TokenUsageUpdated = z.looseObject({
  threadId: z.string(),
  turnId: z.string().optional(),
  tokenUsage: z.looseObject({ last: TokenBreakdown }),
  /** Codex has no cost field; the scripted agent puts the exact report (with cost_cents) here. */
  _meta: z
    .looseObject({
      kandev: z
        .object({
          cost_cents: z.number().nonnegative(),
          tokens_in: z.number().int().nonnegative(),
          tokens_cached_in: z.number().int().nonnegative(),
          tokens_out: z.number().int().nonnegative(),
        })
        .optional(),
    })
    .optional(),
});
const ApprovalRequest = z.looseObject({
  threadId: z.string(),
  turnId: z.string().optional(),
  itemId: z.string().optional(),
  command: z.union([z.string(), z.array(z.string())]).nullish(),
  reason: z.string().nullish(),
  /** Codex 0.169 lists what it accepts here; object-valued decisions (an execpolicy amendment) are not offered to operators. */
  availableDecisions: z.array(z.unknown()).nullish(),
});

type ApprovalDecision = 'accept' | 'acceptForSession' | 'decline' | 'cancel';

/** The approval decisions an operator can pick, as permission options (ACP's kinds, so both protocols read alike). */
const APPROVAL_OPTIONS: ReadonlyArray<{ id: 'accept' | 'acceptForSession' | 'decline'; name: string; kind: string; outcome: 'allowed' | 'denied' }> = [
  { id: 'accept', name: 'Accept', kind: 'allow_once', outcome: 'allowed' },
  { id: 'acceptForSession', name: 'Accept for this session', kind: 'allow_always', outcome: 'allowed' },
  { id: 'decline', name: 'Decline', kind: 'reject_once', outcome: 'denied' },
];

const APPROVAL_METHODS = new Set(['item/commandExecution/requestApproval', 'item/fileChange/requestApproval']);

const stopReasonOf: Record<z.infer<typeof TurnStatus>, AgentctlStopReason> = {
  completed: 'end_turn',
  interrupted: 'cancelled',
  failed: 'error',
  inProgress: 'error',
};

interface CodexTurn {
  turnId: string;
  /** Codex's own id for the turn, known once turn/start answers. */
  codexTurnId: string | undefined;
  interruptRequested: boolean;
  settle(result: { status: z.infer<typeof TurnStatus>; error: string | undefined }): void;
}

export class TurnFailedError extends Error {}

/**
 * The kandev entry of Codex's `mcp_servers` (streamable HTTP). Codex 0.169 refuses `bearer_token`
 * ("not supported for streamable_http"); it takes `http_headers` or `bearer_token_env_var`. The
 * header keeps the token inside the Codex process: an env var would reach every shell command the
 * agent runs.
 */
export function codexMcpServer(mcp: { url: string; token: string | undefined }): { url: string; http_headers?: Record<string, string> } {
  return { url: mcp.url, ...(mcp.token ? { http_headers: { Authorization: `Bearer ${mcp.token}` } } : {}) };
}

export class CodexAdapter extends ProcessAdapter<{ decision: ApprovalDecision }> implements AgentAdapter {
  readonly protocol = 'codex' as const;
  private rpc: JsonLineRpc | undefined;
  private threadId: string | undefined;
  private turn: CodexTurn | undefined;
  private lastTurnId: string | undefined;
  /** The thread's model (thread/start answer): what token usage is priced at. */
  private model: string | undefined;
  /** turn/completed can outrun the turn/start answer; it waits here until the id is known. */
  /** Tool items started and not yet completed: their title and type, for a completion that names only the id. */
  private readonly toolItems = new Map<string, { title: string; kind: string }>();
  private readonly earlyCompletions = new Map<string, z.infer<typeof TurnCompleted>['turn']>();

  private get thread(): { rpc: JsonLineRpc; threadId: string } {
    if (!this.rpc || !this.threadId) throw new Error('Codex thread not established');
    return { rpc: this.rpc, threadId: this.threadId };
  }

  async start(): Promise<void> {
    const agent = await AgentProcess.start(this.spec, this.options, this.log);
    this.process = agent;
    const rpc = new JsonLineRpc(agent.child.stdout, agent.child.stdin, this.log);
    this.rpc = rpc;
    rpc.onNotification((method, params) => this.onNotification(method, params));
    rpc.onRequest((method, params) => this.onRequest(method, params));

    const deadline = <T>(work: Promise<T>, step: string) =>
      withinDeadline(work, this.options.handshakeTimeoutMs, `agent did not answer ${step} within ${this.options.handshakeTimeoutMs} ms`, agent.exited);
    await deadline(rpc.request('initialize', { clientInfo: { name: 'kandev-agentctl', title: 'Kandev agentctl', version: AGENTCTL_VERSION } }), 'initialize');
    rpc.notify('initialized');
    const mcp = this.options.mcp;
    const config = mcp ? { mcp_servers: { kandev: codexMcpServer(mcp) } } : undefined;
    const started = ThreadStartResult.parse(
      await deadline(rpc.request('thread/start', { cwd: this.options.cwd, ...(config ? { config } : {}) }), 'thread/start'),
    );
    this.threadId = started.thread.id;
    this.model = started.model ?? (typeof started.thread.model === 'string' ? started.thread.model : undefined);
    this.log.info({ thread_id: this.threadId, model: this.model, mcp: mcp !== undefined }, 'Codex thread ready');
  }

  async prompt(turnId: string, text: string, context?: string): Promise<AgentctlStopReason> {
    const { rpc, threadId } = this.thread;
    const completion = new Promise<{ status: z.infer<typeof TurnStatus>; error: string | undefined }>((settle) => {
      this.turn = { turnId, codexTurnId: undefined, interruptRequested: false, settle };
    });
    const turn = this.turn;
    if (!turn) throw new Error('turn bookkeeping failed');
    this.lastTurnId = turnId;
    try {
      const started = TurnStartResult.parse(
        await unlessAgentExits(
          rpc.request('turn/start', { threadId, input: [...(context ? [{ type: 'text', text: context }] : []), { type: 'text', text }] }),
          this.agent.exited,
        ),
      );
      turn.codexTurnId = started.turn.id;
      const early = this.earlyCompletions.get(started.turn.id);
      this.earlyCompletions.clear();
      if (early) turn.settle({ status: early.status, error: early.error?.message });
      else if (turn.interruptRequested) this.interrupt(turn);
      const result = await unlessAgentExits(completion, this.agent.exited);
      if (result.status === 'failed') throw new TurnFailedError(result.error ?? 'turn failed');
      return stopReasonOf[result.status];
    } finally {
      this.turn = undefined;
      this.permissions.cancelAll();
    }
  }

  async cancel(): Promise<void> {
    const turn = this.turn;
    if (turn) {
      turn.interruptRequested = true;
      // Without Codex's turn id there is nothing to name yet; prompt() interrupts as soon as it arrives.
      if (turn.codexTurnId) this.interrupt(turn);
    }
    const released = this.permissions.cancelAll();
    this.log.info({ turn_id: turn?.turnId, codex_turn_id: turn?.codexTurnId, permissions_cancelled: released }, 'interrupt requested');
  }

  async stop(graceMs: number): Promise<Termination> {
    return this.agent.terminate(graceMs);
  }

  private interrupt(turn: CodexTurn): void {
    const { rpc, threadId } = this.thread;
    rpc.request('turn/interrupt', { threadId, turnId: turn.codexTurnId }).then(
      () => this.log.debug({ turn_id: turn.turnId }, 'turn/interrupt acknowledged'),
      (err: unknown) => this.log.warn({ turn_id: turn.turnId, err: errorMessage(err) }, 'turn/interrupt failed'),
    );
  }

  private onNotification(method: string, params: unknown): void {
    switch (method) {
      case 'turn/completed': {
        const parsed = TurnCompleted.safeParse(params);
        if (!parsed.success || parsed.data.threadId !== this.threadId) return;
        const done = parsed.data.turn;
        const turn = this.turn;
        if (turn?.codexTurnId === done.id) turn.settle({ status: done.status, error: done.error?.message });
        else if (turn && turn.codexTurnId === undefined) this.earlyCompletions.set(done.id, done);
        return;
      }
      case 'item/agentMessage/delta': {
        const parsed = AgentMessageDelta.safeParse(params);
        const turnId = this.turn?.turnId;
        if (parsed.success && turnId) this.sink.agentMessage(turnId, parsed.data.delta);
        return;
      }
      case 'item/started':
      case 'item/completed': {
        const parsed = ItemNotification.safeParse(params);
        const turnId = this.turn?.turnId;
        if (!parsed.success || !turnId) return;
        const item = parsed.data.item;
        // A completion may repeat the item whole or name it by id only: what the start said is kept.
        const known = this.toolItems.get(item.id);
        const type = item.type ?? known?.kind;
        if (!type || !TOOL_ITEM_TYPES.has(type)) return;
        const command = Array.isArray(item.command) ? item.command.join(' ') : item.command;
        const title =
          command ?? (item.tool ? `${item.server ? `${item.server}.` : ''}${item.tool}` : item.changes?.map((c) => c.path).join(', ')) ?? known?.title ?? type;
        const json = (v: unknown) => (v === undefined || v === null ? '' : typeof v === 'string' ? v : JSON.stringify(v));
        if (method === 'item/started') {
          this.toolItems.set(item.id, { title, kind: type });
          this.sink.toolCall(turnId, { tool_call_id: item.id, phase: 'started', title, kind: type, text: json(item.arguments) });
        } else {
          this.toolItems.delete(item.id);
          const failed = item.status === 'failed' || item.status === 'declined';
          this.sink.toolCall(turnId, {
            tool_call_id: item.id,
            phase: failed ? 'failed' : 'completed',
            title,
            kind: type,
            text: item.aggregatedOutput ?? json(item.result),
          });
        }
        return;
      }
      case 'thread/tokenUsage/updated': {
        const parsed = TokenUsageUpdated.safeParse(params);
        const turnId = this.turn?.turnId ?? this.lastTurnId;
        if (!parsed.success || !turnId) return;
        const exact = parsed.data._meta?.kandev;
        const last = parsed.data.tokenUsage.last;
        if (exact) {
          this.sink.usage(turnId, exact);
          return;
        }
        // Codex reports tokens only: the cost comes from the one price table, or is 0 and unpriced.
        const tokens = { tokens_in: last.inputTokens, tokens_cached_in: last.cachedInputTokens, tokens_out: last.outputTokens };
        this.sink.usage(turnId, { ...costOf(this.model, tokens), ...tokens, ...(this.model ? { model: this.model } : {}) });
        return;
      }
      default:
        return;
    }
  }

  private async onRequest(method: string, params: unknown): Promise<unknown> {
    if (!APPROVAL_METHODS.has(method)) throw new RpcError(-32601, `agentctl does not serve ${method}`);
    const parsed = ApprovalRequest.safeParse(params);
    if (!parsed.success) throw new RpcError(-32602, 'invalid approval request');
    const turnId = this.turn?.turnId;
    // An approval outside a turn has no one to ask; refuse it rather than leave the agent hanging.
    if (!turnId) return { decision: 'cancel' };
    const command = parsed.data.command;
    const title = (Array.isArray(command) ? command.join(' ') : command) ?? parsed.data.reason ?? method;
    // Without a list (older Codex, the scripted agent) accept and decline are always understood.
    const offered = parsed.data.availableDecisions;
    const options = APPROVAL_OPTIONS.filter((o) => (offered ? offered.includes(o.id) : o.id !== 'acceptForSession'));
    return this.permissions.open(
      { turn_id: turnId, permission_id: randomUUID(), title, options: options.map((o) => ({ id: o.id, name: o.name, kind: o.kind })) },
      { choices: options.map((o) => ({ optionId: o.id, answer: { decision: o.id }, outcome: o.outcome })), cancel: { decision: 'cancel' } },
    );
  }
}
