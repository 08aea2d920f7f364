import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isStorableText, Life, LifePermission, Limits, Orch, OrchMcp, OrchPermission, text, type Endpoint } from '../src/index.js';

/**
 * Issue 10, property-based: no request the contracts accept carries text PostgreSQL cannot store
 * (NUL, lone surrogates) or unbounded text, and no input, however deep or mistyped, makes a schema
 * throw. Bounded runs keep this to a few seconds.
 */
const RUNS = 200;
const U = '00000000-0000-4000-8000-000000000001';
const operator = { type: 'operator', id: 'op', workspaces: ['*'] };

/** A valid request per endpoint: the properties mutate it. */
const EXAMPLES: Array<[Endpoint, Record<string, unknown>]> = [
  [Orch.workspaceCreate, { actor: operator, name: 'ws' }],
  [Orch.taskCreate, { actor: operator, workspace_id: U, title: 't', description: 'd', parent_id: U, office: false, agent: 'a', idempotency_key: 'k' }],
  [Orch.taskGet, { actor: operator, task_id: U }],
  [Orch.taskUpdate, { actor: operator, task_id: U, title: 't', status: 'TODO', archived: false }],
  [Orch.sessionStart, { actor: operator, task_id: U, agent: 'a', prompt: 'p' }],
  [Orch.sessionGet, { actor: operator, session_id: U }],
  [Orch.sessionPrompt, { actor: operator, session_id: U, prompt: 'p' }],
  [Orch.agentCancel, { actor: operator, session_id: U, reason: 'r' }],
  [Orch.taskStop, { actor: operator, task_id: U, reason: 'r' }],
  [Orch.taskExecutions, { actor: operator, task_id: U }],
  [Orch.taskQueue, { actor: operator, task_id: U }],
  [Orch.taskAudit, { actor: operator, task_id: U }],
  [Orch.executionAdmit, { execution_id: U, task_id: U, session_id: U, fence_epoch: 0, instance_id: 'i' }],
  [OrchMcp.stopChildTask, { caller_task_id: U, agent_token: 'x.y.z', task_id: U }],
  [OrchMcp.messageTask, { caller_task_id: U, agent_token: 'x.y.z', task_id: U, prompt: 'p', session_id: U, delivery_mode: 'queued', idempotency_key: 'k' }],
  [OrchMcp.createTask, { caller_task_id: U, agent_token: 'x.y.z', title: 't', description: 'd', agent: 'a', prompt: 'p', idempotency_key: 'k' }],
  [OrchMcp.whoami, { caller_task_id: U, agent_token: 'x.y.z' }],
  [
    Life.launch,
    { execution_id: U, task_id: U, session_id: U, workspace_id: U, agent: 'a', fence_epoch: 0, mcp_mode: 'task', prompt: 'p', turn_id: U, context: 'c' },
  ],
  [Life.prompt.at('i'), { execution_id: U, turn_id: U, prompt: 'p', context: 'c' }],
  [Life.stop.at('i'), { execution_id: U, reason: 'r', grace_ms: 1, orphaned: false }],
  [Life.cancel.at('i'), { execution_id: U, turn_id: U, escalate: true }],
  [OrchPermission.respond, { actor: operator, permission_request_id: U, option_id: 'allow', reason: 'r' }],
  [LifePermission.respond.at('i'), { execution_id: U, permission_id: 'p', option_id: 'allow' }],
];

/** Every string reachable in a value, with its path. */
function strings(v: unknown, path = ''): Array<[string, string]> {
  if (typeof v === 'string') return [[path, v]];
  if (Array.isArray(v)) return v.flatMap((x, i) => strings(x, `${path}[${i}]`));
  if (v && typeof v === 'object') return Object.entries(v).flatMap(([k, x]) => strings(x, path ? `${path}.${k}` : k));
  return [];
}
/** Paths of the example's top-level and actor fields that hold strings. */
const stringPaths = (ex: Record<string, unknown>) => strings(ex).map(([p]) => p);
function setPath(obj: Record<string, unknown>, path: string, value: unknown): Record<string, unknown> {
  const copy = structuredClone(obj);
  const parts = path.replace(/\[(\d+)\]/g, '.$1').split('.');
  let cur: any = copy;
  for (const p of parts.slice(0, -1)) cur = cur[p];
  cur[parts.at(-1)!] = value;
  return copy;
}

const deep = (depth: number): unknown => (depth === 0 ? 'leaf' : { a: deep(depth - 1) });
const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
/** Strings an attacker sends: NUL, lone surrogates, very long runs, and ordinary text mixed in. */
const hostileString = fc.oneof(
  fc.tuple(fc.string(), fc.string()).map(([a, b]) => `${a}\u0000${b}`),
  fc.tuple(fc.string(), loneSurrogate, fc.string()).map(([a, s, b]) => `${a}${s}${b}`),
  fc.integer({ min: 1, max: 3 }).map((k) => 'x'.repeat(Limits.prompt * k + 1)),
  fc.string({ unit: 'binary', maxLength: 50 }),
  fc.string({ maxLength: 50 }),
);
const anyValue = fc.oneof(
  hostileString,
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.integer({ min: 1, max: 300 }).map(deep),
  fc.anything({ maxDepth: 4 }),
);

describe.each(EXAMPLES.map(([e, ex]) => [e.name, e, ex] as const))('%s', (_name, endpoint, example) => {
  it('accepts its example (the properties below can fail)', () => {
    expect(endpoint.request.safeParse(example).success).toBe(true);
  });

  it('never passes on unstorable or unbounded text, whatever a string field holds', () => {
    const paths = stringPaths(example);
    fc.assert(
      fc.property(fc.constantFrom(...paths), hostileString, (path, value) => {
        const parsed = endpoint.request.safeParse(setPath(example, path, value));
        if (!parsed.success) return;
        for (const [, s] of strings(parsed.data)) {
          expect(isStorableText(s)).toBe(true);
          expect(s.length).toBeLessThanOrEqual(Limits.prompt);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('never throws, and refuses wrong types and deep objects in any field', () => {
    const fields = Object.keys(example);
    fc.assert(
      fc.property(fc.constantFrom(...fields), anyValue, (field, value) => {
        const result = endpoint.request.safeParse({ ...example, [field]: value });
        if (result.success) {
          // Only values of the field's own type can pass; whatever passed is storable and bounded.
          for (const [, s] of strings(result.data)) expect(isStorableText(s) && s.length <= Limits.prompt).toBe(true);
          expect(JSON.stringify(result.data).length).toBeLessThan(1024 * 1024);
        }
      }),
      { numRuns: RUNS },
    );
    fc.assert(
      fc.property(fc.anything({ maxDepth: 6 }), (junk) => void endpoint.request.safeParse(junk)),
      { numRuns: RUNS },
    );
  });
});

describe('text()', () => {
  it('accepts exactly the storable strings within its bounds', () => {
    const t = text({ min: 1, max: 50 });
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary', maxLength: 60 }), fc.string({ maxLength: 60 }), hostileString), (s) => {
        expect(t.safeParse(s).success).toBe(s.length >= 1 && s.length <= 50 && !s.includes('\u0000') && s.isWellFormed());
      }),
      { numRuns: 1000 },
    );
  });
  it('keeps a paired surrogate (astral characters are text) and refuses each half alone', () => {
    const t = text({ max: 10 });
    expect(t.safeParse('😀').success).toBe(true);
    expect(t.safeParse('😀'.slice(0, 1)).success).toBe(false);
    expect(t.safeParse('😀'.slice(1)).success).toBe(false);
  });
  it('bounds every string of every request schema (no unbounded z.string() left)', () => {
    // A 1 MB string in any string field of any example must be refused.
    for (const [endpoint, example] of EXAMPLES) {
      for (const path of stringPaths(example)) {
        const r = endpoint.request.safeParse(setPath(example, path, 'y'.repeat(1024 * 1024)));
        expect({ endpoint: endpoint.name, path, success: r.success }).toEqual({ endpoint: endpoint.name, path, success: false });
      }
    }
  });
});

it('z is zod 4 (isWellFormed available on this Node)', () => {
  expect(typeof ''.isWellFormed).toBe('function');
  expect(z.string().safeParse('x').success).toBe(true);
});
