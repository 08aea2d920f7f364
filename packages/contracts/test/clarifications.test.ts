import { describe, expect, it } from 'vitest';
import { OrchClarification, OrchMcpClarification } from '../src/index.js';

const BUNDLE = '00000000-0000-4000-8000-000000000001';
const actor = { type: 'operator' as const, id: 'op', workspaces: ['*'] };

describe('clarification endpoints', () => {
  it('keep the waiter side on the MCP surface (kandev.orch.mcp.) and the operator side off it', () => {
    for (const e of Object.values(OrchMcpClarification)) expect(e.subject.startsWith('kandev.orch.mcp.clarification.')).toBe(true);
    for (const e of Object.values(OrchClarification)) expect(e.subject).toMatch(/^kandev\.orch\.(clarification|task)\.[a-z_]+$/);
  });
  it.each([
    ['answers', { answers: [{ question_id: 'q1', answer: 'yes' }] }, true],
    ['skip all', { rejected: true, reason: 'later' }, true],
    ['neither', {}, false],
    ['both', { answers: [{ question_id: 'q1', answer: 'yes' }], rejected: true }, false],
    ['rejected: false alone', { rejected: false }, false],
    ['empty answers', { answers: [] }, false],
  ])('respond takes exactly one of answers / rejected: true (%s)', (_n, body, ok) => {
    expect(OrchClarification.respond.request.safeParse({ actor, bundle_id: BUNDLE, ...body }).success).toBe(ok);
  });
  it('bounds what an agent may ask', () => {
    const ask = (questions: unknown[]) => OrchMcpClarification.ask.request.safeParse({ caller_task_id: BUNDLE, questions }).success;
    expect(ask([{ text: 'ok?' }])).toBe(true);
    expect(ask([])).toBe(false);
    expect(ask([{ text: '' }])).toBe(false);
    expect(ask([{ text: 'x'.repeat(4_001) }])).toBe(false);
    expect(ask(Array.from({ length: 21 }, () => ({ text: 'q' })))).toBe(false);
  });
});
