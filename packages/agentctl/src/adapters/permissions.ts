import type { AgentctlPermissionDecision, AgentctlPermissionOutcome } from '@kandev/contracts/agentctl';
import type { AdapterSink, PermissionRequest } from './adapter.js';

/** The protocol answer for each way a permission request can end, with the outcome it represents. */
export interface PermissionAnswers<Answer> {
  allow: { answer: Answer; outcome: AgentctlPermissionOutcome };
  deny: { answer: Answer; outcome: AgentctlPermissionOutcome };
  cancel: Answer;
}

interface Pending<Answer> {
  turnId: string | null;
  answers: PermissionAnswers<Answer>;
  settle(answer: Answer): void;
}

/**
 * Permission requests the agent is waiting on. Each is answered exactly once: by the operator
 * (POST /api/v1/acp/permission) or, on a cancel, with the protocol's cancelled outcome.
 */
export class PendingPermissions<Answer> {
  private readonly pending = new Map<string, Pending<Answer>>();

  constructor(private readonly sink: AdapterSink) {}

  open(request: PermissionRequest, answers: PermissionAnswers<Answer>): Promise<Answer> {
    return new Promise((settle) => {
      this.pending.set(request.permission_id, { turnId: request.turn_id, answers, settle });
      this.sink.permissionRequested(request);
    });
  }

  answer(permissionId: string, decision: AgentctlPermissionDecision): AgentctlPermissionOutcome | undefined {
    const entry = this.pending.get(permissionId);
    if (!entry) return undefined;
    const { answer, outcome } = entry.answers[decision];
    this.settle(permissionId, entry, answer, outcome);
    return outcome;
  }

  /** Answers every pending request with the cancelled outcome. */
  cancelAll(): number {
    const entries = [...this.pending];
    for (const [id, entry] of entries) this.settle(id, entry, entry.answers.cancel, 'cancelled');
    return entries.length;
  }

  get size(): number {
    return this.pending.size;
  }

  private settle(id: string, entry: Pending<Answer>, answer: Answer, outcome: AgentctlPermissionOutcome): void {
    this.pending.delete(id);
    entry.settle(answer);
    this.sink.permissionResolved(id, entry.turnId, outcome);
  }
}
