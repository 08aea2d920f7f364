import { describe, expect, it } from 'vitest';
import {
  decideAnswers,
  decideCancel,
  decideExpiry,
  decideRejection,
  decideRenewal,
  pickActiveBundle,
  questionsAsked,
  viewOf,
  waiterOf,
  type BundleFacts,
} from '../src/domain/clarifications.js';

const bundle = (over: Partial<BundleFacts> = {}): BundleFacts => ({
  id: '00000000-0000-4000-8000-000000000001',
  task_id: '00000000-0000-4000-8000-000000000002',
  workspace_id: '00000000-0000-4000-8000-000000000003',
  session_id: '00000000-0000-4000-8000-000000000004',
  turn_id: '00000000-0000-4000-8000-000000000005',
  status: 'pending',
  reason: null,
  created_at: '2026-01-01T00:00:00.000Z',
  expires_at: '2026-01-01T00:01:00.000Z',
  closed_at: null,
  detached_at: null,
  detached_reason: null,
  lease_valid: true,
  turn_open: true,
  superseded: false,
  questions: [
    { id: 'a', text: 'A?', options: null, status: 'answered', answer: 'yes' },
    { id: 'b', text: 'B?', options: null, status: 'pending', answer: null },
  ],
  ...over,
});

describe('waiterOf', () => {
  it.each([
    ['live', {}, { live: true, detached: false, detached_reason: null }],
    [
      'recorded detach wins over everything',
      { detached_at: 'x', detached_reason: 'turn_cancelled', superseded: true },
      { live: false, detached: true, detached_reason: 'turn_cancelled' },
    ],
    ['superseded', { superseded: true, turn_open: false, lease_valid: false }, { live: false, detached: true, detached_reason: 'superseded' }],
    ['turn ended', { turn_open: false, lease_valid: false }, { live: false, detached: true, detached_reason: 'turn_ended' }],
    ['lease lapsed', { lease_valid: false }, { live: false, detached: true, detached_reason: 'waiter_lost' }],
    ['closed normally', { status: 'answered' as const, lease_valid: false }, { live: false, detached: false, detached_reason: null }],
  ])('%s', (_n, over, expected) => expect(waiterOf(bundle(over))).toEqual(expected));
});

describe('active bundle', () => {
  it('is the newest pending bundle that is not superseded', () => {
    const older = bundle({ id: 'older' });
    const superseded = bundle({ id: 'superseded', superseded: true });
    const closed = bundle({ id: 'closed', status: 'rejected' });
    expect(pickActiveBundle([closed, superseded, older])?.id).toBe('older');
    expect(pickActiveBundle([superseded, closed])).toBeNull();
  });
  it('a detached current-turn bundle stays active (so the operator can skip it)', () => {
    expect(viewOf(bundle({ lease_valid: false }))).toMatchObject({ active: true, waiter_live: false, detached: true });
  });
});

describe('decisions', () => {
  it('answers keep the bundle open until nothing is pending', () => {
    const b = bundle({ questions: bundle().questions.map((q) => ({ ...q, status: 'pending' as const, answer: null })) });
    expect(decideAnswers(b, [{ question_id: 'a', answer: '1' }])).toMatchObject({ status: 'pending', closes: false });
    expect(
      decideAnswers(b, [
        { question_id: 'a', answer: '1' },
        { question_id: 'b', answer: '2' },
      ]),
    ).toMatchObject({ status: 'answered', closes: true, detach: null });
  });
  it('an answer to a question that is no longer pending is CONFLICT; unknown or twice-named ones are VALIDATION_ERROR', () => {
    expect(() => decideAnswers(bundle(), [{ question_id: 'a', answer: 'again' }])).toThrow(expect.objectContaining({ code: 'CONFLICT' }));
    expect(() => decideAnswers(bundle(), [{ question_id: 'zz', answer: '' }])).toThrow(expect.objectContaining({ code: 'VALIDATION_ERROR' }));
    expect(() =>
      decideAnswers(bundle(), [
        { question_id: 'b', answer: '1' },
        { question_id: 'b', answer: '2' },
      ]),
    ).toThrow(expect.objectContaining({ code: 'VALIDATION_ERROR' }));
  });
  it('rejection touches only pending questions and records the detach when nobody waits', () => {
    const d = decideRejection(bundle({ turn_open: false }));
    expect(d.questions.map((q) => q.status)).toEqual(['answered', 'rejected']);
    expect(d).toMatchObject({ status: 'rejected', closes: true, detach: 'turn_ended' });
    expect(decideRejection(bundle()).detach).toBeNull();
  });
  it('a closed bundle refuses every response with its final state', () => {
    const closed = bundle({ status: 'expired' });
    for (const f of [() => decideRejection(closed), () => decideAnswers(closed, [{ question_id: 'b', answer: '' }]), () => decideCancel(closed)]) {
      expect(f).toThrow(expect.objectContaining({ code: 'CONFLICT', details: expect.objectContaining({ status: 'expired' }) }));
    }
  });
  it('cancel needs a live waiter', () => {
    expect(() => decideCancel(bundle({ lease_valid: false }))).toThrow(expect.objectContaining({ code: 'NOT_FOUND' }));
    expect(decideCancel(bundle()).questions.map((q) => q.status)).toEqual(['answered', 'cancelled']);
  });
  it('expiry applies only to a live waiter; renewal extends or records the loss', () => {
    expect(decideExpiry(bundle())?.questions.map((q) => q.status)).toEqual(['answered', 'expired']);
    expect(decideExpiry(bundle({ superseded: true }))).toBeNull();
    expect(decideRenewal(bundle())).toEqual({ kind: 'extend' });
    expect(decideRenewal(bundle({ lease_valid: false }))).toEqual({ kind: 'detach', reason: 'waiter_lost' });
    expect(decideRenewal(bundle({ detached_at: 'x', lease_valid: true }))).toEqual({ kind: 'none' });
  });
  it('question ids default to their position and must be unique', () => {
    expect(questionsAsked([{ text: 'x' }, { id: 'k', text: 'y', options: ['1'] }]).map((q) => [q.id, q.options])).toEqual([
      ['q1', null],
      ['k', ['1']],
    ]);
    expect(() => questionsAsked([{ text: 'x' }, { id: 'q1', text: 'y' }])).toThrow(expect.objectContaining({ code: 'VALIDATION_ERROR' }));
  });
});
