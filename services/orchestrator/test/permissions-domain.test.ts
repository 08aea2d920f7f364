import { describe, expect, it } from 'vitest';
import type { PermissionRequest } from '@kandev/contracts';
import { checkAnswer, closureOf } from '../src/domain/permissions.js';

const U = '00000000-0000-4000-8000-000000000001';
const row = (over: Partial<PermissionRequest> = {}): PermissionRequest => ({
  id: U,
  workspace_id: U,
  task_id: U,
  session_id: U,
  turn_id: null,
  execution_id: U,
  permission_id: 'p',
  title: 'run ls?',
  options: [
    { option_id: 'allow', name: 'Allow', kind: 'allow_once' },
    { option_id: 'reject', name: 'Reject', kind: 'reject_once' },
  ],
  status: 'pending',
  chosen_option_id: null,
  created_at: '2026-12-03T00:00:00.000Z',
  closed_at: null,
  closed_by: null,
  ...over,
});
const codeOf = (fn: () => void) => {
  try {
    fn();
    return null;
  } catch (e) {
    return (e as { code?: string }).code ?? 'thrown';
  }
};

describe('checkAnswer', () => {
  it.each([
    ['an offered option on a pending request', row(), { option_id: 'allow' }, null],
    ['a cancel of a pending request', row(), { cancelled: true as const }, null],
    ['an option the agent did not offer', row(), { option_id: 'sudo' }, 'VALIDATION_ERROR'],
    ['an answered request', row({ status: 'answered', chosen_option_id: 'allow', closed_at: 'x' }), { option_id: 'allow' }, 'CONFLICT'],
    ['a cancelled request, even with a cancel', row({ status: 'cancelled', closed_at: 'x' }), { cancelled: true as const }, 'CONFLICT'],
  ])('%s', (_name, r, answer, code) => {
    expect(codeOf(() => checkAnswer(r, answer))).toBe(code);
  });
});

describe('closureOf', () => {
  it('an option given is answered with it, whatever its kind', () => {
    expect(closureOf('allowed', 'allow', 'operator:a')).toEqual({ status: 'answered', chosen_option_id: 'allow', closed_by: 'operator:a' });
    expect(closureOf('denied', 'reject', 'operator:a')).toEqual({ status: 'answered', chosen_option_id: 'reject', closed_by: 'operator:a' });
  });
  it('the cancelled outcome, or no option, is cancelled', () => {
    expect(closureOf('cancelled', null, 'system:agent')).toEqual({ status: 'cancelled', chosen_option_id: null, closed_by: 'system:agent' });
    expect(closureOf('allowed', null, 'system:agent').status).toBe('cancelled');
  });
});
