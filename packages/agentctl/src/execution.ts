import { randomUUID } from 'node:crypto';
import { trace } from '@opentelemetry/api';
import type {
  AgentctlCancelResponse,
  AgentctlPermissionAnswerRequest,
  AgentctlPermissionAnswerResponse,
  AgentctlPromptResponse,
  AgentctlState,
  AgentctlStatusResponse,
  AgentctlStopReason,
  AgentctlStopResponse,
} from '@kandev/contracts/agentctl';
import type { AdapterSink, AgentAdapter } from './adapters/adapter.js';
import { AgentctlError } from './errors.js';
import type { EventStream } from './events.js';
import { errorMessage, type Logger } from './log.js';
import { yieldToControlPlane } from './agent-process.js';

/*
 * The rules of one execution: at most one turn in flight, cancels fenced to the turn the caller
 * captured, and teardown as cancel → SIGTERM → SIGKILL. Protocol details stay in the adapters; the
 * stdout events are emitted here so both protocols report the same way.
 */

export interface ExecutionOptions {
  executionId: string | undefined;
  cancelTimeoutMs: number;
}

interface InFlightTurn {
  id: string;
  completion: Promise<AgentctlStopReason>;
  cancelRequested: boolean;
  /** A cancel of this turn already went unacknowledged: a stop does not wait on the agent again. */
  cancelIgnored: boolean;
  reported: boolean;
}

/** How long an exited agent's in-flight turn may take to report before it is closed as an error. */
const TURN_SETTLE_AFTER_EXIT_MS = 1000;

const tracer = trace.getTracer('@kandev/agentctl');

/** A tool call's input or output on stdout is cut here: the transcript keeps 64 KiB of an item anyway. */
const TOOL_TEXT_MAX_BYTES = 64 * 1024;
function cutText(s: string, maxBytes: number): string {
  if (Buffer.byteLength(s, 'utf8') <= maxBytes) return s;
  let out = Buffer.from(s, 'utf8').subarray(0, maxBytes).toString('utf8');
  // A code point cut in half decodes as U+FFFD at the end: drop it.
  if (out.endsWith('\uFFFD')) out = out.slice(0, -1);
  return out;
}

/**
 * How a stop spends its grace (R-10.5, ADR 0061): one deadline, `graceMs` from the stop, shared by
 * the wait for the cancelled turn and the wait after SIGTERM; SIGKILL at the deadline. The turn gets
 * at most half of it (and no more than the cancel timeout), so an agent that ignores the cancel
 * still gets a SIGTERM and time to act on it; a turn whose cancel already went unacknowledged gets
 * no wait at all. Before, the stop waited min(grace, cancel timeout) for the turn and then the
 * whole grace again after SIGTERM: a stubborn agent lived twice the grace past its stop.
 */
export function stopSchedule(graceMs: number, cancelTimeoutMs: number, cancelIgnored: boolean): { cancelWaitMs: number } {
  if (cancelIgnored || graceMs <= 0) return { cancelWaitMs: 0 };
  return { cancelWaitMs: Math.min(cancelTimeoutMs, Math.ceil(graceMs / 2)) };
}

export class Execution {
  readonly adapter: AgentAdapter;
  private state: AgentctlState = 'ready';
  private turn: InFlightTurn | undefined;
  /** Turn ids that already ran, so a retried prompt can never run a turn twice. */
  private readonly finishedTurns = new Set<string>();
  private stopping: Promise<AgentctlStopResponse> | undefined;
  private usageSeq = 0;
  /** Makes usage_event_id unique across executions even when no execution id was given. */
  private readonly usageScope: string;

  private readonly sink: AdapterSink = {
    agentMessage: (turnId, text) => this.events.emit({ type: 'agent_message', turn_id: turnId, text }),
    toolCall: (turnId, call) => this.events.emit({ type: 'tool_call', turn_id: turnId, ...call, text: cutText(call.text, TOOL_TEXT_MAX_BYTES) }),
    usage: (turnId, usage) => {
      this.usageSeq += 1;
      this.events.emit({ type: 'usage', turn_id: turnId, usage_event_id: `${this.usageScope}:${turnId}:${this.usageSeq}`, ...usage });
    },
    permissionRequested: (request) => this.events.emit({ type: 'permission_requested', ...request }),
    permissionResolved: (permissionId, turnId, outcome, optionId) =>
      this.events.emit({
        type: 'permission_resolved',
        permission_id: permissionId,
        turn_id: turnId,
        outcome,
        ...(optionId !== null ? { option_id: optionId } : {}),
      }),
  };

  constructor(
    makeAdapter: (sink: AdapterSink) => AgentAdapter,
    private readonly events: EventStream,
    private readonly options: ExecutionOptions,
    private readonly log: Logger,
  ) {
    this.adapter = makeAdapter(this.sink);
    this.usageScope = options.executionId ?? randomUUID();
  }

  status(): AgentctlStatusResponse {
    return {
      execution_id: this.options.executionId ?? null,
      protocol: this.adapter.protocol,
      agent_pid: this.adapter.pid,
      state: this.state,
      turn_id: this.turn?.id ?? null,
    };
  }

  /** Starts a turn in the background; its end is the `turn_completed` event. */
  startTurn(text: string, turnId: string = randomUUID(), context?: string): AgentctlPromptResponse {
    if (this.state === 'stopping' || this.state === 'exited') throw new AgentctlError('UNAVAILABLE', 'agent not running');
    if (this.turn) {
      // The same turn id again is a retry of the request that started it, not a second turn.
      if (this.turn.id === turnId) return { turn_id: turnId };
      throw new AgentctlError('CONFLICT', `turn ${this.turn.id} is still in flight`, { details: { turn_id: this.turn.id } });
    }
    if (this.finishedTurns.has(turnId)) throw new AgentctlError('CONFLICT', `turn ${turnId} already ran`, { details: { turn_id: turnId } });

    const turn: InFlightTurn = { id: turnId, completion: Promise.resolve('end_turn'), cancelRequested: false, cancelIgnored: false, reported: false };
    this.turn = turn;
    this.state = 'running';
    this.events.emit({ type: 'turn_started', turn_id: turnId });
    this.log.info({ turn_id: turnId }, 'turn started');
    turn.completion = this.adapter.prompt(turnId, text, context).then(
      (stopReason) => this.finishTurn(turn, stopReason),
      (err: unknown) => {
        // A turn that dies while being cancelled or torn down was cancelled, whatever the agent said last.
        const cancelled = turn.cancelRequested || this.state === 'stopping';
        return this.finishTurn(turn, cancelled ? 'cancelled' : 'error', cancelled ? undefined : errorMessage(err));
      },
    );
    return { turn_id: turnId };
  }

  async cancel(turnId: string | undefined): Promise<AgentctlCancelResponse> {
    const turn = this.turn;
    if (!turn) return { cancelled: false, reason: 'no_active_turn' };
    if (turnId !== undefined && turnId !== turn.id) {
      throw new AgentctlError('CONFLICT', `turn ${turnId} is not the turn in flight`, { details: { turn_id: turnId, in_flight_turn_id: turn.id } });
    }
    return tracer.startActiveSpan(
      'agentctl.cancel',
      { attributes: { 'kandev.turn_id': turn.id, 'kandev.protocol': this.adapter.protocol } },
      async (span): Promise<AgentctlCancelResponse> => {
        try {
          await this.requestCancel(turn);
          const stopReason = await this.settled(turn, this.options.cancelTimeoutMs);
          if (stopReason === undefined) {
            turn.cancelIgnored = true;
            throw new AgentctlError('UNAVAILABLE', `agent did not acknowledge cancel within ${this.options.cancelTimeoutMs} ms`, {
              status: 504,
              details: { turn_id: turn.id },
            });
          }
          span.setAttribute('kandev.stop_reason', stopReason);
          return { cancelled: true, turn_id: turn.id, stop_reason: stopReason };
        } finally {
          span.end();
        }
      },
    );
  }

  answerPermission(request: AgentctlPermissionAnswerRequest): AgentctlPermissionAnswerResponse {
    const { permission_id: id } = request;
    const choice =
      request.option_id !== undefined
        ? { option_id: request.option_id }
        : request.cancel
          ? { cancel: true as const }
          : { decision: request.decision ?? 'deny' };
    const result = this.adapter.answerPermission(id, choice);
    switch (result.kind) {
      case 'settled':
        return { permission_id: id, ...result.settlement };
      case 'already_settled':
        throw new AgentctlError('CONFLICT', `permission request ${id} was already ${result.settlement.outcome}`, {
          details: { permission_id: id, ...result.settlement },
        });
      case 'unknown_option':
        throw new AgentctlError('VALIDATION_ERROR', `the agent offered no option ${request.option_id ?? ''}`, { details: { permission_id: id } });
      case 'not_found':
        throw new AgentctlError('NOT_FOUND', `no permission request ${id}`, { details: { permission_id: id } });
    }
  }

  /**
   * Cancel the turn, SIGTERM, SIGKILL: all within `graceMs` of this call. The grace is one
   * deadline shared by the cancel wait and the SIGTERM wait (stopSchedule). Idempotent.
   */
  stop(graceMs: number): Promise<AgentctlStopResponse> {
    this.stopping ??= this.runStop(graceMs);
    return this.stopping;
  }

  get isStopping(): boolean {
    return this.stopping !== undefined;
  }

  /** For an agent that exited on its own: closes its in-flight turn so the parent never waits on it. */
  async agentExited(): Promise<void> {
    const turn = this.turn;
    if (turn && (await this.settled(turn, TURN_SETTLE_AFTER_EXIT_MS)) === undefined) {
      this.finishTurn(turn, 'error', 'agent exited during the turn');
    }
    this.state = 'exited';
  }

  private async runStop(graceMs: number): Promise<AgentctlStopResponse> {
    this.state = 'stopping';
    yieldToControlPlane(this.adapter.pid);
    const deadline = Date.now() + graceMs;
    const turn = this.turn;
    if (turn) {
      const { cancelWaitMs } = stopSchedule(graceMs, this.options.cancelTimeoutMs, turn.cancelIgnored);
      await this.requestCancel(turn);
      if (cancelWaitMs > 0) await this.settled(turn, cancelWaitMs);
    }
    // What is left of the grace, not the grace again: a stubborn agent is SIGKILLed at the deadline.
    const { how, exit } = await this.adapter.stop(Math.max(0, deadline - Date.now()));
    if (this.turn) await this.settled(this.turn, TURN_SETTLE_AFTER_EXIT_MS);
    if (this.turn) this.finishTurn(this.turn, 'cancelled');
    this.state = 'exited';
    this.log.info({ how, grace_ms: graceMs, exit_code: exit.code, signal: exit.signal }, 'agent stopped');
    return { stopped: true, how, agent_pid: this.adapter.pid, grace_ms: graceMs, exit_code: exit.code, signal: exit.signal };
  }

  private async requestCancel(turn: InFlightTurn): Promise<void> {
    turn.cancelRequested = true;
    try {
      await this.adapter.cancel();
    } catch (err) {
      // The agent may already be gone; the turn then settles through the exit path.
      this.log.warn({ turn_id: turn.id, err: errorMessage(err) }, 'cancel could not be sent');
    }
  }

  /** The turn's stop reason, or undefined when it has not ended within `ms`. */
  private settled(turn: InFlightTurn, ms: number): Promise<AgentctlStopReason | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), ms);
    });
    return Promise.race([turn.completion, timeout]).finally(() => clearTimeout(timer));
  }

  private finishTurn(turn: InFlightTurn, stopReason: AgentctlStopReason, error?: string): AgentctlStopReason {
    if (turn.reported) return stopReason;
    turn.reported = true;
    if (this.turn === turn) this.turn = undefined;
    this.finishedTurns.add(turn.id);
    if (this.state === 'running') this.state = 'ready';
    this.events.emit({ type: 'turn_completed', turn_id: turn.id, stop_reason: stopReason, ...(error ? { error } : {}) });
    this.log.info({ turn_id: turn.id, stop_reason: stopReason, ...(error ? { error } : {}) }, 'turn completed');
    return stopReason;
  }
}
