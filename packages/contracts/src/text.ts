import { z } from 'zod';

/**
 * Bounds of every caller-supplied string and array (docs/limits.md). They are checked at the edge,
 * in the contract schemas, so bad input is a VALIDATION_ERROR before any service acts on it.
 *
 * Lengths are in UTF-16 code units (JavaScript string length). One unit is at most 3 bytes of
 * UTF-8, so the biggest request any schema admits stays far below the NATS max payload (1 MiB by
 * default); the gateway's body limit (512 KiB) is tighter still.
 */
export const Limits = {
  /** Workspace name. */
  name: 200,
  /** Task title. */
  title: 500,
  /** Task description. */
  description: 20_000,
  /** Agent name (a catalogue key). */
  agent: 200,
  /** A prompt or message for an agent. */
  prompt: 100_000,
  /** Reason of a cancel, stop or hold (kept in the audit log). */
  reason: 2_000,
  /** Client-chosen idempotency key of a create or message. */
  idempotencyKey: 200,
  /** A forwarded agent token (JWT). */
  token: 4_096,
  /** Workspaces listed in an operator actor. */
  workspaces: 1_000,
  /** Operator / system identity. */
  actorId: 200,
} as const;

/**
 * Text PostgreSQL (and every JSON consumer) can store faithfully: no NUL (U+0000), which `text`
 * columns reject, and no lone surrogate, which has no UTF-8 encoding and would be silently replaced.
 */
export function isStorableText(s: string): boolean {
  if (s.includes('\u0000')) return false;
  return (s as string & { isWellFormed(): boolean }).isWellFormed();
}

/** A bounded string that refuses NUL and lone surrogates. `max` is required: no text is unbounded. */
export function text(opts: { min?: number; max: number }) {
  let s = z.string().max(opts.max, { message: `at most ${opts.max} characters` });
  if (opts.min !== undefined) s = s.min(opts.min, { message: opts.min === 1 ? 'must not be empty' : `at least ${opts.min} characters` });
  return s.refine(isStorableText, { message: 'must not contain NUL (U+0000) or unpaired surrogate characters' });
}

/** Whether every string of a JSON value, object keys included, is storable text (isStorableText). */
export function isStorableJson(v: unknown): boolean {
  const stack: unknown[] = [v];
  while (stack.length) {
    const x = stack.pop();
    if (typeof x === 'string') {
      if (!isStorableText(x)) return false;
    } else if (Array.isArray(x)) {
      stack.push(...x);
    } else if (x && typeof x === 'object') {
      for (const [k, val] of Object.entries(x)) {
        if (!isStorableText(k)) return false;
        stack.push(val);
      }
    }
  }
  return true;
}

/**
 * A free-form JSON object (a wakeup's `payload`): its keys are `text({max: keyMax})`, and every
 * string inside it, however deep, must be storable text too (PostgreSQL `jsonb` refuses `\u0000`).
 */
export function storableObject(opts: { keyMax: number }) {
  return z
    .record(text({ max: opts.keyMax }), z.unknown())
    .refine(isStorableJson, { message: 'must not contain NUL (U+0000) or unpaired surrogate characters' });
}

type AnyDef = { type: string; [k: string]: unknown };
const defOf = (s: unknown): AnyDef => (s as { _zod: { def: AnyDef } })._zod.def;
const hasCheck = (def: AnyDef, fn: unknown) => ((def.checks as Array<{ _zod: { def: { fn?: unknown } } }> | undefined) ?? []).some((c) => c._zod.def.fn === fn);

/**
 * The one text rule (docs/limits.md), checked on a schema rather than trusted: the paths of every
 * string a request schema admits without the storable-text refinement, i.e. a plain `z.string()`
 * where `text()` belongs, or `unknown` values no `storableObject` check covers. String formats
 * (`z.uuid()`, `z.iso.datetime()`) are guarded by their pattern. An empty list is the rule holding;
 * packages/contracts/test/text-rule.test.ts runs this over every endpoint of the catalogue, and the
 * gateway and mcp tests over their route bodies and tool inputs.
 */
export function unguardedStrings(schema: z.ZodType, path = '$', covered = false, seen = new Set<unknown>()): string[] {
  if (seen.has(schema)) return [];
  seen.add(schema);
  const def = defOf(schema);
  const guarded = covered || hasCheck(def, isStorableJson);
  const inner = (s: unknown, p = path) => unguardedStrings(s as z.ZodType, p, guarded, seen);
  switch (def.type) {
    case 'string':
      return guarded || def.format !== undefined || hasCheck(def, isStorableText) ? [] : [path];
    case 'unknown':
    case 'any':
      return guarded ? [] : [path];
    case 'object': {
      const shape = def.shape as Record<string, unknown>;
      const out = Object.entries(shape).flatMap(([k, v]) => inner(v, `${path}.${k}`));
      if (def.catchall) out.push(...inner(def.catchall, `${path}.*`));
      return out;
    }
    case 'array':
      return inner(def.element, `${path}[]`);
    case 'tuple':
      return [...(def.items as unknown[]).flatMap((it, i) => inner(it, `${path}[${i}]`)), ...(def.rest ? inner(def.rest, `${path}[]`) : [])];
    case 'record':
      return [...inner(def.keyType, `${path}{key}`), ...inner(def.valueType, `${path}{}`)];
    case 'union':
      return (def.options as unknown[]).flatMap((o) => inner(o));
    case 'intersection':
      return [...inner(def.left), ...inner(def.right)];
    case 'pipe':
      return inner(def.in);
    case 'lazy':
      return inner((def.getter as () => unknown)());
    case 'optional':
    case 'nullable':
    case 'default':
    case 'prefault':
    case 'catch':
    case 'readonly':
    case 'nonoptional':
      return inner(def.innerType);
    default:
      // number, boolean, enum, literal, null, date...: no text.
      return [];
  }
}
