import type { AskOutcome, ClarificationBundleView } from '@kandev/contracts';

/**
 * What the waiting `ask_user_questions` call returns for a bundle, or null while it is still
 * waiting (pending with a live waiter). A detached bundle never delivers its outcome: the turn
 * that asked has moved on, so whatever an operator did later must not steer this call.
 */
export function outcomeOf(v: ClarificationBundleView): AskOutcome | null {
  const answers = v.questions.filter((q) => q.status === 'answered').map((q) => ({ question_id: q.id, answer: q.answer ?? '' }));
  const base = { bundle_id: v.id, answers, questions: v.questions };
  if (v.detached) return { ...base, status: 'detached', detached: true, reason: v.detached_reason };
  switch (v.status) {
    case 'pending':
      return null;
    case 'answered':
      return { ...base, status: 'answered' };
    case 'rejected':
      return { ...base, status: 'rejected', rejected: true, reason: v.reason };
    case 'cancelled':
      return { ...base, status: 'cancelled', cancelled: true, reason: v.reason };
    case 'expired':
      return { ...base, status: 'expired', expired: true };
  }
}
