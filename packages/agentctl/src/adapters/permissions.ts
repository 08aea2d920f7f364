import type { AgentctlPermissionDecision, AgentctlPermissionOutcome } from '@kandev/contracts/agentctl';
import type { AdapterSink, PermissionRequest } from './adapter.js';

/** One option the agent offered: its protocol answer and the outcome it represents. */
export interface PermissionChoice<Answer> {
  optionId: string;
  answer: Answer;
  outcome: Exclude<AgentctlPermissionOutcome, 'cancelled'>;
}

/** The protocol answer for each way a permission request can end. */
export interface PermissionAnswers<Answer> {
  choices: PermissionChoice<Answer>[];
  cancel: Answer;
}

/** How the operator answers: an option, the first allowing/rejecting option, or cancelled. */
export type PermissionAnswerChoice = { option_id: string } | { decision: AgentctlPermissionDecision } | { cancel: true };

/** How a request ended, remembered so a retry is answered the same and a late answer learns the truth. */
export interface PermissionSettlement {
  outcome: AgentctlPermissionOutcome;
  option_id: string | null;
}

export type PermissionAnswerResult =
  | { kind: 'settled'; settlement: PermissionSettlement }
  /** Settled before, another way (a turn cancel, another answer). */
  | { kind: 'already_settled'; settlement: PermissionSettlement }
  | { kind: 'unknown_option' }
  | { kind: 'not_found' };

interface Pending<Answer> {
  turnId: string | null;
  answers: PermissionAnswers<Answer>;
  settle(answer: Answer): void;
}

/** Settled requests kept for retries; an execution never has more than a handful in flight. */
const SETTLED_KEPT = 256;

/**
 * Permission requests the agent is waiting on. Each is answered exactly once: by the operator
 * (POST /api/v1/acp/permission) or, on a cancel or the turn's end, with the protocol's cancelled
 * outcome. This map is the arbiter between an operator's answer and a turn cancel: whichever
 * reaches it first settles the request, and the other learns how it ended.
 */
export class PendingPermissions<Answer> {
  private readonly pending = new Map<string, Pending<Answer>>();
  private readonly settled = new Map<string, PermissionSettlement>();

  constructor(private readonly sink: AdapterSink) {}

  open(request: PermissionRequest, answers: PermissionAnswers<Answer>): Promise<Answer> {
    return new Promise((settle) => {
      this.pending.set(request.permission_id, { turnId: request.turn_id, answers, settle });
      this.sink.permissionRequested(request);
    });
  }

  answer(permissionId: string, choice: PermissionAnswerChoice): PermissionAnswerResult {
    const entry = this.pending.get(permissionId);
    if (!entry) {
      const before = this.settled.get(permissionId);
      if (!before) return { kind: 'not_found' };
      // The same answer again is a retry of the one that settled it.
      const same =
        'cancel' in choice
          ? before.outcome === 'cancelled'
          : 'option_id' in choice
            ? before.option_id === choice.option_id
            : before.outcome === (choice.decision === 'allow' ? 'allowed' : 'denied');
      return { kind: same ? 'settled' : 'already_settled', settlement: before };
    }
    if ('cancel' in choice) return { kind: 'settled', settlement: this.settle(permissionId, entry, entry.answers.cancel, 'cancelled', null) };
    const wanted = chosenOption(entry.answers.choices, choice);
    if ('option_id' in choice && !wanted) return { kind: 'unknown_option' };
    // A decision the agent offered no option for (no reject option, say) ends the request cancelled.
    const settlement = wanted
      ? this.settle(permissionId, entry, wanted.answer, wanted.outcome, wanted.optionId)
      : this.settle(permissionId, entry, entry.answers.cancel, 'cancelled', null);
    return { kind: 'settled', settlement };
  }

  /** Answers every pending request with the cancelled outcome. */
  cancelAll(): number {
    const entries = [...this.pending];
    for (const [id, entry] of entries) this.settle(id, entry, entry.answers.cancel, 'cancelled', null);
    return entries.length;
  }

  get size(): number {
    return this.pending.size;
  }

  private settle(id: string, entry: Pending<Answer>, answer: Answer, outcome: AgentctlPermissionOutcome, optionId: string | null): PermissionSettlement {
    this.pending.delete(id);
    const settlement = { outcome, option_id: optionId };
    this.settled.set(id, settlement);
    if (this.settled.size > SETTLED_KEPT) this.settled.delete(this.settled.keys().next().value!);
    entry.settle(answer);
    this.sink.permissionResolved(id, entry.turnId, outcome, optionId);
    return settlement;
  }
}

function chosenOption<Answer>(
  choices: PermissionChoice<Answer>[],
  choice: { option_id: string } | { decision: AgentctlPermissionDecision },
): PermissionChoice<Answer> | undefined {
  if ('option_id' in choice) return choices.find((c) => c.optionId === choice.option_id);
  const outcome = choice.decision === 'allow' ? 'allowed' : 'denied';
  return choices.find((c) => c.outcome === outcome);
}
