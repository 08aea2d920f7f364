import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import * as contracts from '../src/index.js';
import { storableObject, text, unguardedStrings, type Endpoint } from '../src/index.js';
// Relative, not @kandev/testkit: testkit depends on contracts.
import { poisonedCases, validExample } from '@kandev/testkit';

/**
 * The one text rule (SPEC, docs/limits.md): every string of every request schema of the
 * endpoint catalogue refuses NUL and lone surrogates. The catalogue is read from the package's
 * exports, so an endpoint added tomorrow is checked without touching this file.
 */
export function endpointCatalogue(): Endpoint[] {
  const out: Endpoint[] = [];
  for (const exported of Object.values(contracts)) {
    // Catalogues are plain objects of endpoints (Orch, Holds, …); schemas and arrays are not.
    if (!exported || typeof exported !== 'object' || Array.isArray(exported) || '_zod' in exported) continue;
    for (const v of Object.values(exported as Record<string, unknown>)) {
      if (!v || typeof v !== 'object' || Array.isArray(v) || '_zod' in v) continue;
      if ('subject' in v && 'request' in v) out.push(v as Endpoint);
      else if ('at' in v && typeof (v as { at: unknown }).at === 'function') out.push((v as { at: (i: string) => Endpoint }).at('instance-1'));
    }
  }
  return out;
}

/**
 * Requests whose strings are not caller text: the orchestrator sends the holds service the hold it
 * committed, read back from PostgreSQL, so every string in it was stored already.
 */
export const TEXT_RULE_EXEMPT: Record<string, string> = {
  'holds.hold.applied': 'the hold row the orchestrator committed (read back from PostgreSQL)',
  'holds.hold.released': 'the hold row the orchestrator committed (read back from PostgreSQL)',
};

describe('text rule over the endpoint catalogue', () => {
  const endpoints = endpointCatalogue().filter((e) => !(e.name in TEXT_RULE_EXEMPT));
  it('finds the catalogue (this test can fail)', () => {
    expect(endpoints.length).toBeGreaterThan(30);
    expect(endpoints.map((e) => e.name)).toEqual(
      expect.arrayContaining(['orch.tree.pause', 'holds.cost.record', 'holds.wakeup.create', 'orch.clarification.respond']),
    );
  });
  it.each(endpoints.map((e) => [e.name, e] as const))('%s: every request string is guarded', (_n, e) => {
    expect(unguardedStrings(e.request as z.ZodType)).toEqual([]);
  });
});

describe('unguardedStrings (the guard itself can fail)', () => {
  it('flags plain strings and uncovered unknowns, wherever they sit', () => {
    const s = z.object({
      ok: text({ max: 5 }).optional(),
      id: z.uuid(),
      bad: z.string(),
      deep: z.array(z.object({ bad: z.string().nullable() })),
      free: z.record(z.string(), z.unknown()),
      either: z.union([z.literal('a'), z.string()]),
    });
    expect(unguardedStrings(s)).toEqual(['$.bad', '$.deep[].bad', '$.free{key}', '$.free{}', '$.either']);
  });
  it('a storableObject covers its values, however deep, and refuses NUL in them', () => {
    const p = storableObject({ keyMax: 10 });
    expect(unguardedStrings(z.object({ payload: p.optional() }))).toEqual([]);
    expect(p.safeParse({ prompt: 'hi', n: [1, { x: 'ok' }] }).success).toBe(true);
    expect(p.safeParse({ prompt: 'a\u0000b' }).success).toBe(false);
    expect(p.safeParse({ n: [{ x: '\ud800' }] }).success).toBe(false);
    expect(p.safeParse({ ['k\u0000']: 1 }).success).toBe(false);
  });
  it('describe() and other clones keep the refinement', () => {
    expect(unguardedStrings(z.object({ a: text({ max: 3 }).describe('x').min(1) }))).toEqual([]);
  });
});

/**
 * The same rule, tried: for every endpoint, a valid request generated from its schema, then each
 * of its strings poisoned in turn (NUL, lone surrogate) must be refused.
 */
describe.each(
  endpointCatalogue()
    .filter((e) => !(e.name in TEXT_RULE_EXEMPT))
    .map((e) => [e.name, e] as const),
)('%s, generated requests', (_n, e) => {
  const example = validExample(e.request as z.ZodType);
  it('accepts the generated example', () => {
    expect((e.request as z.ZodType).safeParse(example).success).toBe(true);
  });
  const cases = poisonedCases(example);
  if (cases.length === 0) return;
  it.each(cases.map((c) => [c.name, c.body] as const))('refuses %s', (_c, body) => {
    expect((e.request as z.ZodType).safeParse(body).success).toBe(false);
  });
});
