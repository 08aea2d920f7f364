import { z } from 'zod';

/*
 * What the model stub answers is scripted from the prompt itself: a line `@@stub {json}` in the latest
 * user message. The prompt travels through the whole stack unchanged (gateway → orchestrator →
 * lifecycle → agentctl → agent → model request), so a test scripts the "model" the same way a user
 * would talk to a real one, with no side channel into the stub.
 */

export const STUB_MARKER = '@@stub';

export const Directive = z.union([
  /** Answer at once with this text. */
  z.object({ say: z.string() }),
  /** Stream one chunk every `every_ms` for `ms` (default a minute): the turn stays live and cancellable. */
  z.object({ slow: z.object({ ms: z.number().int().positive().default(60_000), every_ms: z.number().int().positive().default(200) }) }),
  /**
   * Call a tool offered in the request (matched by its name, by `<namespace>__<name>` or by a
   * `__<name>` suffix), then, once the tool result comes back, answer `then`.
   */
  z.object({ tool: z.string().min(1), args: z.record(z.string(), z.unknown()).default({}), then: z.string().default('tool result received') }),
]);
export type Directive = z.infer<typeof Directive>;

/** A script line for prompts: `@@stub {"say":"hi"}`. */
export const stubPrompt = (d: z.input<typeof Directive>, lead = 'Follow the test script.'): string => `${lead}\n${STUB_MARKER} ${JSON.stringify(d)}`;

export function findDirective(text: string): Directive | undefined {
  const at = text.lastIndexOf(STUB_MARKER);
  if (at < 0) return undefined;
  const line =
    text
      .slice(at + STUB_MARKER.length)
      .split('\n')[0]
      ?.trim() ?? '';
  // The JSON may be followed by whatever the agent appended on the same line; take the balanced object.
  const json = balancedObject(line);
  if (!json) return undefined;
  try {
    const parsed = Directive.safeParse(JSON.parse(json));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

function balancedObject(s: string): string | undefined {
  if (!s.startsWith('{')) return undefined;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return s.slice(0, i + 1);
  }
  return undefined;
}
