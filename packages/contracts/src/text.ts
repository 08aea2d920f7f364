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
