import { describe, expect, it } from 'vitest';
import { EventData, ErrorCode, Life, Orch, OrchMcp, httpStatusOf, KandevError, pingEndpoint, replyEnvelope, TaskStopResult } from '../src/index.js';

describe('error codes', () => {
  it('map to the HTTP statuses of SPEC §5', () => {
    expect(Object.fromEntries(ErrorCode.options.map((c) => [c, httpStatusOf(c)]))).toEqual({
      BAD_REQUEST: 400,
      VALIDATION_ERROR: 400,
      UNAUTHORIZED: 401,
      FORBIDDEN: 403,
      NOT_FOUND: 404,
      CONFLICT: 409,
      INTERNAL_ERROR: 500,
      UNAVAILABLE: 503,
      UNKNOWN_ACTION: 400,
      RATE_LIMITED: 429,
    });
  });
  it('round-trip through the error body', () => {
    const e = new KandevError('CONFLICT', 'queue full', { size: 10, limit: 10 });
    expect(KandevError.from(e.toBody())).toMatchObject({ code: 'CONFLICT', message: 'queue full', details: { size: 10, limit: 10 } });
  });
});

describe('endpoint catalogue', () => {
  const all = [...Object.values(Orch), ...Object.values(OrchMcp), Life.launch, Life.list, Life.get];
  it('gives every endpoint its own subject under kandev.', () => {
    const subjects = all.map((e) => e.subject);
    expect(new Set(subjects).size).toBe(subjects.length);
    for (const s of subjects) expect(s).toMatch(/^kandev\.[a-z_.]+$/);
  });
  it('keeps the MCP surface under kandev.orch.mcp. (the subject NATS permissions guard)', () => {
    for (const e of Object.values(OrchMcp)) expect(e.subject.startsWith('kandev.orch.mcp.')).toBe(true);
    for (const e of Object.values(Orch)) expect(e.subject.startsWith('kandev.orch.mcp.')).toBe(false);
  });
  it('routes instance endpoints to the owner instance', () => {
    expect(Life.stop.at('life-1').subject).toBe('kandev.life.life-1.exec.stop');
    expect(pingEndpoint('holds').subject).toBe('kandev.holds.ping');
  });
  it('validates replies in the envelope', () => {
    const env = replyEnvelope(TaskStopResult);
    expect(env.safeParse({ ok: false, error: { code: 'NOT_FOUND', message: 'execution not found' } }).success).toBe(true);
    expect(env.safeParse({ ok: true, result: { task_id: 'x', status: 'stopped', executions: [] } }).success).toBe(false);
    expect(env.safeParse({ ok: false, error: { code: 'NOPE', message: '' } }).success).toBe(false);
  });
  it('strips unknown arguments of the MCP stop (R-1.1)', () => {
    const parsed = OrchMcp.stopChildTask.request.parse({
      caller_task_id: '00000000-0000-4000-8000-000000000001',
      task_id: '00000000-0000-4000-8000-000000000002',
      reason: 'x',
      force: true,
    });
    expect(Object.keys(parsed).sort()).toEqual(['caller_task_id', 'task_id']);
  });
});

it('has a data schema for every event the gateway pushes', async () => {
  const { PUSHED_EVENT_TYPES } = await import('../src/index.js');
  for (const t of PUSHED_EVENT_TYPES) expect(EventData[t]).toBeDefined();
});
