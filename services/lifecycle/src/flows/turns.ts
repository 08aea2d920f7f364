import { conflict, unavailable, type Life, type RequestOf, type ResultOf } from '@kandev/contracts';
import { AgentctlHttpError, AgentctlUnreachable } from '../agentctl/client.js';
import { CANCEL_ESCALATION, cancelEscalation, decideCancel } from '../domain/cancel.js';
import { promptAccepted, promptRefusal } from '../domain/turns.js';
import type { LiveExecution } from '../live-execution.js';
import type { Executions } from './context.js';
import { finishTurn } from './events.js';

/** A prompt to an idle, launched execution: a new turn. */
export async function sendPrompt(x: LiveExecution, turnId: string, prompt: string, context?: string): Promise<void> {
  const refusal = promptRefusal(x.turnView);
  if (refusal) throw conflict(refusal.message, { execution_id: x.id, turn_id: x.record.turn_id });
  if (x.finishedTurns.includes(turnId)) throw conflict('turn id was already used', { turn_id: turnId });
  // Reserve the turn before the call: a second prompt meanwhile sees it in flight, and the
  // turn's own lines (which may beat the HTTP reply) find it current.
  x.applyTurn(promptAccepted(x.turnView, turnId));
  void x.persist();
  try {
    await x.client!.prompt(prompt, turnId, context);
  } catch (e) {
    if (x.record.turn_id === turnId) {
      x.update({ status: x.record.status === 'STOPPING' ? 'STOPPING' : 'READY', turn_id: null });
      void x.persist();
    }
    if (e instanceof AgentctlHttpError && e.status === 409) throw conflict('agent has a turn in flight', { execution_id: x.id });
    if (e instanceof AgentctlUnreachable || (e instanceof AgentctlHttpError && e.status === 503)) throw unavailable('agent not running', e);
    throw unavailable(`agentctl refused the prompt: ${(e as Error).message}`, e);
  }
  x.log.info({ turn_id: turnId }, 'prompt sent');
}

/** Turn cancel, fenced to the turn the caller captured (B-2); an unacknowledged cancel escalates to teardown. */
export async function cancelTurn(ctx: Executions, x: LiveExecution, req: RequestOf<typeof Life.cancel>): Promise<ResultOf<typeof Life.cancel>> {
  const decision = decideCancel(x.record, req.turn_id);
  switch (decision.kind) {
    case 'not_running':
      throw conflict('agent not running', { execution_id: x.id, status: x.record.status });
    case 'turn_mismatch':
      x.log.warn({ requested_turn_id: decision.requested, turn_id: decision.current }, 'cancel names another turn; nothing cancelled');
      throw conflict('cancel names a turn that is not the current one', {
        execution_id: x.id,
        turn_id: decision.current,
        requested_turn_id: decision.requested,
      });
    case 'no_active_turn':
      return { cancelled: false, turn_id: null, stop_reason: null, reason: 'no_active_turn' };
    case 'cancel':
      break;
  }
  const { env } = ctx.deps;
  const started = performance.now();
  let answer;
  try {
    answer = await x.client!.cancel(decision.turnId, env.CANCEL_TIMEOUT_MS + 2_000);
  } catch (e) {
    if (e instanceof AgentctlHttpError && e.status === 409) {
      throw conflict('cancel names a turn that is not the current one', { execution_id: x.id, requested_turn_id: decision.turnId });
    }
    // No acknowledgement (504, or silence): report it, and escalate so the session is never wedged.
    const silent = e instanceof AgentctlUnreachable || (e instanceof AgentctlHttpError && (e.status === 504 || e.code === 'UNAVAILABLE'));
    const escalate = req.escalate !== false;
    x.log.warn(
      { err: e, turn_id: decision.turnId, escalate },
      escalate ? 'agent did not acknowledge cancel; tearing down' : 'agent did not acknowledge cancel',
    );
    if (!escalate) {
      if (silent) throw unavailable(`agent did not acknowledge cancel within ${env.CANCEL_TIMEOUT_MS} ms`, e);
      throw unavailable(`cancel failed: ${(e as Error).message}`, e);
    }
    // the answer says what happens next. The agent is being torn down (its grace is one
    // deadline from now), so this is no failure to retry (not UNAVAILABLE): a CONFLICT naming the
    // escalation, which the orchestrator records as a stop of the session (ADR 0061).
    void ctx.teardowns.teardown(x, { reason: CANCEL_ESCALATION.reason, graceMs: env.TEARDOWN_GRACE_MS, orphaned: false });
    throw conflict(
      silent
        ? `agent did not acknowledge the cancel within ${env.CANCEL_TIMEOUT_MS} ms; it is being torn down`
        : `cancel failed (${(e as Error).message}); the agent is being torn down`,
      cancelEscalation({ executionId: x.id, turnId: decision.turnId, graceMs: env.TEARDOWN_GRACE_MS, cancelTimeoutMs: env.CANCEL_TIMEOUT_MS }),
    );
  }
  if (!answer.cancelled) return { cancelled: false, turn_id: null, stop_reason: null, reason: answer.reason };
  // The reply and agentctl's turn_completed line race; whichever comes first completes the turn.
  // The reply waits for the turn's state (READY), not for its events: they are queued in the
  // journal, which syncs and publishes them right after (the orchestrator takes whichever of the
  // reply and turn.completed reaches it first).
  await x.inOrder(async () => finishTurn(ctx.deps.journal, x, answer.turn_id, answer.stop_reason));
  x.log.info({ turn_id: answer.turn_id, stop_reason: answer.stop_reason, cancel_ms: Math.round(performance.now() - started) }, 'turn cancelled');
  return { cancelled: true, turn_id: answer.turn_id, stop_reason: answer.stop_reason, reason: null };
}
