import type { z } from 'zod';

/**
 * Requests generated from the contracts (SPEC, docs/limits.md): a valid example of a zod
 * schema, built from the schema itself, and the paths of every string in it, so a test can poison
 * each string field in turn (NUL, a lone surrogate) and expect a refusal. Nothing is listed by
 * hand: a field added to a contract is poisoned by the next run.
 */

type AnyDef = { type: string; [k: string]: unknown };
const defOf = (s: unknown): AnyDef => (s as { _zod: { def: AnyDef } })._zod.def;
const U = '00000000-0000-4000-8000-00000000000a';

/** The string value poisons: NUL and an unpaired surrogate, each inside ordinary text. */
export const POISONS: ReadonlyArray<readonly [string, string]> = [
  ['NUL', 'a\u0000b'],
  ['lone surrogate', 'a\ud800b'],
];

function minLength(def: AnyDef): number {
  let min = 0;
  for (const c of (def.checks as Array<{ _zod: { def: { check?: string; minimum?: number; length?: number } } }> | undefined) ?? []) {
    const d = c._zod.def;
    if (d.check === 'min_length' && typeof d.minimum === 'number') min = Math.max(min, d.minimum);
    if (d.check === 'length_equals' && typeof d.length === 'number') min = d.length;
  }
  return min;
}

function stringExample(def: AnyDef): string {
  switch (def.format) {
    case 'uuid':
    case 'guid':
      return U;
    case 'datetime':
      return new Date(Date.UTC(2030, 0, 1)).toISOString();
    case 'date':
      return '2030-01-01';
    case 'email':
      return 'a@example.com';
    case 'url':
      return 'https://example.com/';
  }
  return 'x'.repeat(Math.max(1, minLength(def)));
}

/** A value the schema accepts, with every optional field present (so its strings can be poisoned). */
export function exampleOf(schema: z.ZodType): unknown {
  const def = defOf(schema);
  switch (def.type) {
    case 'string':
      return stringExample(def);
    case 'number': {
      const min = ((def.checks as Array<{ _zod: { def: { check?: string; value?: number } } }> | undefined) ?? []).find(
        (c) => c._zod.def.check === 'greater_than',
      )?._zod.def.value;
      return typeof min === 'number' ? Math.ceil(min) + 1 : 1;
    }
    case 'boolean':
      return false;
    case 'null':
      return null;
    case 'literal':
      return (def.values as unknown[])[0];
    case 'enum':
      return Object.values(def.entries as Record<string, unknown>)[0];
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(def.shape as Record<string, z.ZodType>)) out[k] = exampleOf(v);
      return out;
    }
    case 'array':
      return Array.from({ length: Math.max(1, minLength(def)) }, () => exampleOf(def.element as z.ZodType));
    case 'record':
      return { [String(exampleOf(def.keyType as z.ZodType))]: exampleOf(def.valueType as z.ZodType) };
    case 'unknown':
    case 'any':
      return 'x';
    case 'union':
      return exampleOf((def.options as z.ZodType[])[0]!);
    case 'intersection':
      return { ...(exampleOf(def.left as z.ZodType) as object), ...(exampleOf(def.right as z.ZodType) as object) };
    case 'pipe':
      return exampleOf(def.in as z.ZodType);
    case 'lazy':
      return exampleOf((def.getter as () => z.ZodType)());
    case 'default':
    case 'prefault':
    case 'optional':
    case 'nullable':
    case 'catch':
    case 'readonly':
    case 'nonoptional':
      return exampleOf(def.innerType as z.ZodType);
    default:
      throw new Error(`exampleOf: no example for a ${def.type} schema`);
  }
}

/** Every string in a value, by path (`a.b[0].c`; record keys are not listed). */
export function stringPaths(v: unknown, path: Array<string | number> = []): Array<Array<string | number>> {
  if (typeof v === 'string') return [path];
  if (Array.isArray(v)) return v.flatMap((x, i) => stringPaths(x, [...path, i]));
  if (v && typeof v === 'object') return Object.entries(v).flatMap(([k, x]) => stringPaths(x, [...path, k]));
  return [];
}

export function withValueAt<T>(value: T, path: ReadonlyArray<string | number>, replacement: unknown): T {
  const copy = structuredClone(value) as Record<string | number, unknown>;
  let cur = copy;
  for (const p of path.slice(0, -1)) cur = cur[p] as Record<string | number, unknown>;
  cur[path.at(-1)!] = replacement;
  return copy as T;
}

/**
 * A valid example of a request schema. Object-level refinements (`answers` xor `rejected`) may
 * refuse the all-fields example: then top-level fields holding no string are dropped, one at a
 * time, until the schema accepts it. Throws when no example is found, so a test cannot pass by
 * poisoning nothing.
 */
export function validExample(schema: z.ZodType): Record<string, unknown> {
  const full = exampleOf(schema) as Record<string, unknown>;
  if (schema.safeParse(full).success) return full;
  for (const k of Object.keys(full)) {
    if (stringPaths(full[k]).length > 0) continue;
    const fewer = { ...full };
    delete fewer[k];
    if (schema.safeParse(fewer).success) return fewer;
  }
  throw new Error(`no valid example: ${JSON.stringify(schema.safeParse(full).error?.issues)}`);
}

/** The example with one string poisoned, for each string path and poison. */
export function poisonedCases(example: Record<string, unknown>, skip: (path: ReadonlyArray<string | number>) => boolean = () => false) {
  return stringPaths(example)
    .filter((p) => !skip(p))
    .flatMap((path) => POISONS.map(([poison, value]) => ({ name: `${path.join('.')} ← ${poison}`, path, body: withValueAt(example, path, value) })));
}
