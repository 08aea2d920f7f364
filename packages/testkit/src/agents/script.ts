import { z } from 'zod';

/* The prompt grammar both scripted agents understand (docs/agents.md, "The scripted agents"). */

export const UsageStep = z.object({
  usage: z.object({
    cost_cents: z.number().nonnegative(),
    tokens_in: z.number().int().nonnegative(),
    tokens_cached_in: z.number().int().nonnegative(),
    tokens_out: z.number().int().nonnegative(),
  }),
});

export const ScriptStep = z.union([
  z.object({ sleep_ms: z.number().int().nonnegative() }),
  z.object({ say: z.string() }),
  UsageStep,
  z.object({ ask: z.array(z.object({ id: z.string().optional(), text: z.string(), options: z.array(z.string()).optional() })).min(1) }),
  z.object({ mcp: z.object({ tool: z.string().min(1), args: z.record(z.string(), z.unknown()).default({}) }) }),
  z.object({ permission: z.string() }),
  /**
   * Extension: the turn runs a CPU-bound subprocess for N ms, as an agent running a build or a test
   * suite does (it inherits the agent's priority); a cancel kills it and ends the turn at once.
   */
  z.object({ busy_ms: z.number().int().positive() }),
  /** Extension for tests of error handling: the turn fails with this message. */
  z.object({ fail: z.string() }),
  /**
   * Extension for tests of isolation: the agent starts a process that leaves its tree at
   * once (double fork, a session of its own, re-parented away from the agent) and lives on,
   * ignoring SIGTERM when `ignore_sigterm`; the agent says `orphan <pid>`.
   */
  z.object({ orphan: z.object({ ignore_sigterm: z.boolean().default(true) }) }),
  /**
   * Extension for tests of agent settings and homes (docs/agents.md, `settings_from`): the agent
   * reads this file (`~/` is its HOME) and says `read_file <path>: <content>`, or
   * `read_file <path>: error <code>` when it cannot (EACCES from another execution's home).
   */
  z.object({ read_file: z.string().min(1) }),
]);
export type ScriptStep = z.infer<typeof ScriptStep>;
export type Usage = z.infer<typeof UsageStep>['usage'];

export const Script = z.object({
  script: z.array(ScriptStep),
  ignore_cancel: z.boolean().default(false),
  ignore_sigterm: z.boolean().default(false),
});
export type Script = z.infer<typeof Script>;

export type ParsedPrompt = { kind: 'echo'; text: string } | { kind: 'script'; script: Script } | { kind: 'invalid'; message: string };

/** Not JSON (or JSON that is not an object with `script`) is echoed; a malformed script is reported, not guessed at. */
export function parsePrompt(text: string): ParsedPrompt {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { kind: 'echo', text };
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw) || !('script' in raw)) return { kind: 'echo', text };
  const parsed = Script.safeParse(raw);
  if (!parsed.success) return { kind: 'invalid', message: z.prettifyError(parsed.error) };
  return { kind: 'script', script: parsed.data };
}
